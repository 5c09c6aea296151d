/* The profile's reports: symbols, folded stacks, pprof, blame, top sites
 * (scr_profile_symbol, scr_profile_write; docs/profile.md).
 *
 * Everything here runs at report time, outside the sampler: it may
 * allocate (under LD_PRELOAD that is scralloc's malloc, which is fine
 * here), open files and start addr2line.  One lock (pr_lock) covers the
 * symbol caches and serializes the reports. */
#include "internal.h"
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- a growable byte buffer; a failed allocation sets oom and drops
 * whatever comes after ---- */

typedef struct pr_buf {
  char *p;
  size_t len, cap; /* len <= cap */
  bool oom;
} pr_buf;

static bool pr_reserve(pr_buf *b, size_t more) {
  if (b->oom) return false;
  if (b->len + more <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + more) cap *= 2;
  char *p = realloc(b->p, cap);
  if (p == NULL) {
    b->oom = true;
    return false;
  }
  b->p = p;
  b->cap = cap;
  return true;
}

static void pr_put(pr_buf *b, const void *s, size_t n) {
  if (n == 0 || !pr_reserve(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void pr_putc(pr_buf *b, char c) { pr_put(b, &c, 1); }
static void pr_puts(pr_buf *b, const char *s) { pr_put(b, s, strlen(s)); }

static void pr_printf(pr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pr_printf(pr_buf *b, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    pr_put(b, small, (size_t)n);
    return;
  }
  if (!pr_reserve(b, (size_t)n + 1)) return;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static const char *pr_basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* Rounded to the nearest integer, never below zero (no libm: the
 * preload library links only libdl). */
static unsigned long long pr_round(double v) { return v > 0 ? (unsigned long long)(v + 0.5) : 0; }

/* The caches' memory (modules, symbols, what each return address is):
 * kept for the life of the process, and taken from mmap rather than
 * malloc so that the profile does not show the reports' own caches as
 * live blocks of whoever asked for a report.  A bump allocator over
 * chunks, under pr_lock; never freed. */
#define PR_KEEP_CHUNK ((size_t)1 << 20)
static char *pr_keep_at, *pr_keep_end;

static void *pr_map(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void *pr_keep(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > PR_KEEP_CHUNK / 4) return pr_map(n);
  if ((size_t)(pr_keep_end - pr_keep_at) < n) {
    char *c = pr_map(PR_KEEP_CHUNK);
    if (c == NULL) return NULL;
    pr_keep_at = c;
    pr_keep_end = c + PR_KEEP_CHUNK;
  }
  void *p = pr_keep_at;
  pr_keep_at += n;
  return p; /* zeroed: fresh anonymous memory */
}

static char *pr_keep_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = pr_keep(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ---- modules and their symbols ----
 *
 * A module is one loaded object (the program, a shared library) as
 * dl_iterate_phdr shows it.  Its function symbols come from the file's
 * .symtab (else .dynsym), read from the file mapped read-only: dladdr
 * knows only the exported names, and neither a static function nor a
 * program's own function is exported. */

typedef struct pr_sym {
  uintptr_t addr, size; /* link-time address (run-time minus the module's bias) */
  const char *name;     /* in the mapped file's string table, NUL-terminated there */
} pr_sym;

typedef struct pr_module {
  char *path;           /* what is opened and given to addr2line */
  char *name;           /* shown in "module+0xoffset": the file's base name */
  char *file;           /* the file's path as pprof's mapping names it */
  uintptr_t bias;       /* load address minus link address */
  uintptr_t lo, hi;     /* the run-time range of its PT_LOAD segments */
  uintptr_t file_off;   /* the file offset of its first PT_LOAD segment */
  void *map;            /* the file mapped, NULL when it could not be read */
  size_t map_len;
  pr_sym *syms;         /* sorted by addr; nsyms entries */
  size_t nsyms;
  bool debug;           /* has DWARF sections: addr2line can give file:line */
  bool no_addr2line;    /* addr2line could not be started for it */
  bool program;         /* the main program */
} pr_module;

#define PR_MODULES_MAX 512
static pthread_mutex_t pr_lock = PTHREAD_MUTEX_INITIALIZER;
static pr_module *pr_modules[PR_MODULES_MAX]; /* [0, pr_nmodules): under pr_lock */
static unsigned pr_nmodules;

static int pr_sym_cmp(const void *a, const void *b) {
  const pr_sym *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Reads the symbols and notes the debug sections of m's file.  Any
 * inconsistency in the file leaves m without symbols. */
static void pr_elf_read(pr_module *m) {
  int fd = open(m->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size >= sizeof(ElfW(Ehdr)))
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return;
  size_t len = (size_t)st.st_size;
  m->map = map;
  m->map_len = len;
  const unsigned char *base = map;
  const ElfW(Ehdr) *eh = map;
  unsigned char cls = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32; /* this process's */
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != cls) return;
  if (eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff == 0 || eh->e_shoff > len ||
      (size_t)eh->e_shnum > (len - eh->e_shoff) / sizeof(ElfW(Shdr)) || eh->e_shstrndx >= eh->e_shnum)
    return;
  const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(base + eh->e_shoff);
  const ElfW(Shdr) *names = &sh[eh->e_shstrndx];
  if (names->sh_offset > len || names->sh_size > len - names->sh_offset) return;
  const char *shstr = (const char *)base + names->sh_offset;
  const ElfW(Shdr) *symtab = NULL, *dynsym = NULL;
  for (unsigned i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_name < names->sh_size) {
      const char *n = shstr + sh[i].sh_name;
      size_t room = names->sh_size - sh[i].sh_name;
      if (strncmp(n, ".debug_info", room) == 0 || strncmp(n, ".zdebug_info", room) == 0 ||
          strncmp(n, ".debug_line", room) == 0)
        m->debug = true;
    }
    if (sh[i].sh_type == SHT_SYMTAB) symtab = &sh[i];
    if (sh[i].sh_type == SHT_DYNSYM) dynsym = &sh[i];
  }
  const ElfW(Shdr) *s = symtab ? symtab : dynsym;
  if (s == NULL || s->sh_entsize != sizeof(ElfW(Sym)) || s->sh_link >= eh->e_shnum) return;
  const ElfW(Shdr) *strs = &sh[s->sh_link];
  if (s->sh_offset > len || s->sh_size > len - s->sh_offset || strs->sh_offset > len ||
      strs->sh_size > len - strs->sh_offset || strs->sh_size == 0)
    return;
  const ElfW(Sym) *sym = (const ElfW(Sym) *)(base + s->sh_offset);
  const char *str = (const char *)base + strs->sh_offset;
  size_t n = s->sh_size / sizeof(ElfW(Sym)), k = 0;
  pr_sym *out = pr_keep((n ? n : 1) * sizeof *out);
  if (out == NULL) return;
  for (size_t i = 0; i < n; i++) {
    unsigned type = ELF64_ST_TYPE(sym[i].st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[i].st_shndx == SHN_UNDEF || sym[i].st_value == 0 ||
        sym[i].st_name == 0 || sym[i].st_name >= strs->sh_size)
      continue;
    /* the name must end inside the string table */
    if (memchr(str + sym[i].st_name, '\0', strs->sh_size - sym[i].st_name) == NULL) continue;
    out[k++] = (pr_sym){sym[i].st_value, sym[i].st_size, str + sym[i].st_name};
  }
  qsort(out, k, sizeof *out, pr_sym_cmp);
  m->syms = out;
  m->nsyms = k;
}

/* The function symbol of m that covers link-time address a, or NULL. */
static const pr_sym *pr_sym_find(const pr_module *m, uintptr_t a) {
  size_t lo = 0, hi = m->nsyms;
  while (lo < hi) { /* the first symbol above a */
    size_t mid = lo + (hi - lo) / 2;
    if (m->syms[mid].addr <= a) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return NULL;
  const pr_sym *s = &m->syms[lo - 1];
  /* a sized symbol ends; an unsized one (hand-written code) runs to the next */
  for (const pr_sym *t = s; t >= m->syms && t->addr == s->addr; t--)
    if (t->size == 0 || a < t->addr + t->size) return t;
  return NULL;
}

typedef struct pr_find {
  uintptr_t pc;
  bool found, program;
  char name[4096];
  uintptr_t bias, lo, hi, file_off;
} pr_find;

static int pr_find_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  pr_find *f = arg;
  bool in = false;
  uintptr_t lo = UINTPTR_MAX, hi = 0, off = 0;
  for (unsigned i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
    if (s < lo) lo = s, off = ph->p_offset;
    if (e > hi) hi = e;
    if (f->pc >= s && f->pc < e) in = true;
  }
  if (!in) return 0;
  f->found = true;
  f->bias = info->dlpi_addr;
  f->lo = lo;
  f->hi = hi;
  f->file_off = off;
  f->program = info->dlpi_name == NULL || info->dlpi_name[0] == '\0';
  snprintf(f->name, sizeof f->name, "%s", f->program ? "" : info->dlpi_name);
  return 1;
}

/* The module holding pc (under pr_lock), read the first time; NULL when
 * no loaded object covers pc or memory ran out. */
static pr_module *pr_module_of(uintptr_t pc) {
  for (unsigned i = 0; i < pr_nmodules; i++)
    if (pc >= pr_modules[i]->lo && pc < pr_modules[i]->hi) return pr_modules[i];
  pr_find *f = calloc(1, sizeof *f);
  if (f == NULL) return NULL;
  f->pc = pc;
  dl_iterate_phdr(pr_find_cb, f);
  pr_module *m = NULL;
  if (!f->found || pr_nmodules == PR_MODULES_MAX || (m = pr_keep(sizeof *m)) == NULL) goto out;
  m->bias = f->bias;
  m->lo = f->lo;
  m->hi = f->hi;
  m->file_off = f->file_off;
  m->program = f->program;
  if (f->program) {
    /* the program's file by its name; /proc/PID/exe when that name is
     * gone (the file was replaced or deleted: the link still opens it,
     * and in addr2line too, where /proc/self would be addr2line) */
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    if (n > 0 && access(exe, R_OK) == 0) snprintf(f->name, sizeof f->name, "%s", exe);
    else snprintf(f->name, sizeof f->name, "/proc/%d/exe", (int)getpid());
    m->name = pr_keep_str(n > 0 ? pr_basename(exe) : "program");
    m->file = pr_keep_str(n > 0 ? exe : "program");
  } else {
    m->name = pr_keep_str(pr_basename(f->name));
    m->file = pr_keep_str(f->name);
  }
  m->path = pr_keep_str(f->name);
  if (m->name == NULL || m->path == NULL || m->file == NULL) {
    m = NULL;
    goto out;
  }
  pr_elf_read(m);
  pr_modules[pr_nmodules++] = m;
out:
  free(f);
  return m;
}

/* The module of this file's own code: the allocator's frames, at the
 * inner end of every stack, are left out of the reports. */
static pr_module *pr_self_module(void) { return pr_module_of((uintptr_t)(void *)pr_self_module); }

/* ---- what a return address is: its frames, innermost first (several
 * when addr2line finds calls inlined there) ---- */

typedef struct pr_frame {
  const char *func; /* never NULL */
  const char *file; /* NULL when unknown */
  unsigned line;
} pr_frame;

typedef struct pr_pc {
  uintptr_t pc;
  pr_module *mod;   /* NULL: no loaded object covers it */
  const char *sym;  /* the symbol table's name, or NULL */
  unsigned n;       /* frames in f; 0 until resolved */
  pr_frame *f;
  bool looked;      /* mod and sym are known */
  bool lines_tried; /* addr2line was asked (or cannot be) */
} pr_pc;

/* Open addressing on pc, capacity a power of two, at most half full. */
static pr_pc *pr_pcs;
static size_t pr_pcs_cap, pr_pcs_n;

static size_t pr_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static pr_pc *pr_pc_slot(uintptr_t pc) {
  if ((pr_pcs_n + 1) * 2 > pr_pcs_cap) {
    size_t cap = pr_pcs_cap ? pr_pcs_cap * 2 : 1024;
    pr_pc *t = pr_map(cap * sizeof *t);
    if (t == NULL) return NULL;
    for (size_t i = 0; i < pr_pcs_cap; i++) {
      if (pr_pcs[i].pc == 0) continue;
      size_t j = pr_hash(pr_pcs[i].pc) & (cap - 1);
      while (t[j].pc) j = (j + 1) & (cap - 1);
      t[j] = pr_pcs[i];
    }
    if (pr_pcs) munmap(pr_pcs, pr_pcs_cap * sizeof *pr_pcs);
    pr_pcs = t;
    pr_pcs_cap = cap;
  }
  size_t j = pr_hash(pc) & (pr_pcs_cap - 1);
  while (pr_pcs[j].pc && pr_pcs[j].pc != pc) j = (j + 1) & (pr_pcs_cap - 1);
  if (pr_pcs[j].pc == 0) {
    pr_pcs[j].pc = pc;
    pr_pcs_n++;
  }
  return &pr_pcs[j];
}

/* The pc's entry with its module and symbol (no file:line yet). */
static pr_pc *pr_pc_get(uintptr_t pc) {
  if (pc == 0) return NULL;
  pr_pc *e = pr_pc_slot(pc);
  if (e == NULL || e->looked) return e;
  e->looked = true;
  e->mod = pr_module_of(pc);
  /* pc - 1: a return address may be the first byte after a function
   * that ends in a call (a noreturn callee) */
  const pr_sym *s = e->mod ? pr_sym_find(e->mod, pc - 1 - e->mod->bias) : NULL;
  if (s) e->sym = s->name;
  else {
    Dl_info di;
    if (dladdr((void *)pc, &di) && di.dli_sname && di.dli_saddr) e->sym = di.dli_sname;
  }
  if (e->mod == NULL || !e->mod->debug) e->lines_tried = true;
  return e;
}

/* The name of pc without debug information: its symbol, else
 * "module+0xoffset". */
static const char *pr_pc_plain_name(pr_pc *e) {
  if (e->sym) return e->sym;
  char tmp[512];
  if (e->mod) snprintf(tmp, sizeof tmp, "%s+0x%lx", e->mod->name, (unsigned long)(e->pc - e->mod->bias));
  else snprintf(tmp, sizeof tmp, "0x%lx", (unsigned long)e->pc);
  char *d = pr_keep_str(tmp);
  e->sym = d;
  return d ? d : "?";
}

/* The frames when addr2line gave none. */
static void pr_pc_plain(pr_pc *e) {
  static pr_frame unknown = {"?", NULL, 0};
  if (e->n) return;
  pr_frame *f = pr_keep(sizeof *f);
  if (f == NULL) {
    e->f = &unknown;
    e->n = 1;
    return;
  }
  *f = (pr_frame){pr_pc_plain_name(e), NULL, 0};
  e->f = f;
  e->n = 1;
}

/* ---- file:line through addr2line ----
 *
 * Why addr2line and not a DWARF reader of our own: the line tables and
 * the inlined-call trees are spread over several sections in several
 * DWARF versions and forms (and may be compressed or in split files);
 * a reader correct on all of that is a project of its own, while
 * binutils' addr2line, started only at report time and only when it is
 * on PATH, handles every form and demangles.  Without it the reports
 * still name functions from the symbol tables. */

/* The environment for addr2line: ours without LD_PRELOAD and SCRALLOC_*
 * (it must not run on scralloc nor write a profile of its own). */
static char **pr_child_env(void) {
  size_t n = 0;
  for (char **e = environ; e && *e; e++) n++;
  char **env = malloc((n + 1) * sizeof *env);
  if (env == NULL) return NULL;
  size_t k = 0;
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "SCRALLOC_", 9) != 0) env[k++] = *e;
  env[k] = NULL;
  return env;
}

/* Runs argv (addr2line) and returns its standard output in out; false
 * when it could not be started. */
static bool pr_run(char *const argv[], pr_buf *out) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  char **env = pr_child_env();
  pid_t pid;
  int rc = env ? posix_spawnp(&pid, argv[0], &fa, NULL, argv, env) : ENOMEM;
  posix_spawn_file_actions_destroy(&fa);
  free(env);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return false;
  }
  char chunk[8192];
  for (;;) {
    ssize_t r = read(fds[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    pr_put(out, chunk, (size_t)r);
  }
  close(fds[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return true;
}

/* One address's lines of addr2line -a -f -i output (pairs of "function"
 * and "file:line" after the address) into e's frames. */
static void pr_pc_parse(pr_pc *e, char **lines, size_t n) {
  pr_frame *f = n / 2 ? pr_keep(n / 2 * sizeof *f) : NULL;
  if (f == NULL) return;
  unsigned k = 0;
  for (size_t i = 0; i + 1 < n; i += 2) {
    char *fn = lines[i], *loc = lines[i + 1];
    char *d = strstr(loc, " (discriminator");
    if (d) *d = '\0';
    char *colon = strrchr(loc, ':');
    unsigned line = 0;
    if (colon) {
      *colon = '\0';
      line = (unsigned)strtoul(colon + 1, NULL, 10);
    }
    const char *file = strcmp(loc, "??") == 0 || loc[0] == '\0' ? NULL : pr_keep_str(loc);
    const char *func = strcmp(fn, "??") == 0 ? NULL : pr_keep_str(fn);
    /* the outermost of the chain is the function itself: the symbol
     * table knows it where DWARF did not */
    if (func == NULL && i + 2 >= n) func = pr_pc_plain_name(e);
    if (func == NULL) continue;
    f[k++] = (pr_frame){func, file, file ? line : 0};
  }
  if (k == 0) return;
  e->f = f;
  e->n = k;
}

/* "0x" and hex digits: the line addr2line -a prints before an
 * address's frames (no function name looks like that). */
static bool pr_is_address_line(const char *l) {
  return l[0] == '0' && l[1] == 'x' && l[2] && l[2 + strspn(l + 2, "0123456789abcdef")] == '\0';
}

/* Asks addr2line about the given pcs, all of module m, a batch at a
 * time (on the command line: nothing to write to its input while its
 * output fills a pipe). */
#define PR_A2L_BATCH 1024
static void pr_addr2line(pr_module *m, pr_pc **pcs, size_t n) {
  char *argv[8 + PR_A2L_BATCH];
  char (*addr)[24] = malloc(PR_A2L_BATCH * sizeof *addr);
  if (addr == NULL) return;
  for (size_t at = 0; at < n && !m->no_addr2line; at += PR_A2L_BATCH) {
    size_t k = n - at < PR_A2L_BATCH ? n - at : PR_A2L_BATCH, a = 0;
    argv[a++] = "addr2line";
    argv[a++] = "-a";
    argv[a++] = "-f";
    argv[a++] = "-C";
    argv[a++] = "-i";
    argv[a++] = "-e";
    argv[a++] = m->path;
    for (size_t i = 0; i < k; i++) {
      snprintf(addr[i], sizeof addr[i], "0x%lx", (unsigned long)(pcs[at + i]->pc - 1 - m->bias));
      argv[a++] = addr[i];
    }
    argv[a] = NULL;
    pr_buf out = {0};
    if (!pr_run(argv, &out)) {
      m->no_addr2line = true;
      free(out.p);
      break;
    }
    pr_putc(&out, '\0');
    if (out.oom) {
      free(out.p);
      continue;
    }
    /* split into lines; an address line ("0x" and hex digits) starts
     * each address's group, in the order given */
    size_t nl = 0;
    for (size_t i = 0; i < out.len; i++) nl += out.p[i] == '\n';
    char **lines = malloc((nl + 1) * sizeof *lines);
    if (lines == NULL) {
      free(out.p);
      continue;
    }
    size_t cnt = 0;
    for (char *s = out.p, *nx; *s; s = nx) {
      nx = strchr(s, '\n');
      if (nx) *nx++ = '\0';
      else nx = s + strlen(s);
      lines[cnt++] = s;
    }
    size_t which = 0, i = 0;
    while (i < cnt && which < k) {
      if (!pr_is_address_line(lines[i])) {
        i++;
        continue;
      }
      size_t j = i + 1;
      while (j < cnt && !pr_is_address_line(lines[j])) j++;
      pr_pc_parse(pcs[at + which], lines + i + 1, j - i - 1);
      which++;
      i = j;
    }
    free(lines);
    free(out.p);
  }
  free(addr);
}

static int pr_pcp_cmp(const void *a, const void *b) {
  const pr_pc *x = *(pr_pc *const *)a, *y = *(pr_pc *const *)b;
  if (x->mod != y->mod) return (uintptr_t)x->mod < (uintptr_t)y->mod ? -1 : 1;
  return x->pc < y->pc ? -1 : x->pc > y->pc;
}

/* Gives every entry of pcs its frames, asking addr2line once per
 * module for all the pcs of that module not asked yet (under pr_lock). */
static void pr_resolve(pr_pc **pcs, size_t n) {
  pr_pc **ask = malloc((n ? n : 1) * sizeof *ask);
  size_t k = 0;
  if (ask) {
    for (size_t i = 0; i < n; i++)
      if (!pcs[i]->lines_tried && !pcs[i]->mod->no_addr2line) ask[k++] = pcs[i];
    qsort(ask, k, sizeof *ask, pr_pcp_cmp);
    for (size_t i = 0; i < k;) {
      size_t j = i;
      while (j < k && ask[j]->mod == ask[i]->mod) j++;
      pr_addr2line(ask[i]->mod, ask + i, j - i);
      for (size_t t = i; t < j; t++) ask[t]->lines_tried = true;
      i = j;
    }
    free(ask);
  }
  for (size_t i = 0; i < n; i++) pr_pc_plain(pcs[i]);
}

/* "function (file:line)", "function" without a file, into out. */
static void pr_frame_name(pr_buf *out, const pr_frame *f) {
  pr_puts(out, f->func);
  if (f->file) pr_printf(out, " (%s:%u)", pr_basename(f->file), f->line);
}

size_t scr_profile_symbol(const void *pc, char *buf, size_t len) {
  pr_buf b = {0};
  pthread_mutex_lock(&pr_lock);
  pr_pc *e = pr_pc_get((uintptr_t)pc);
  if (e) {
    pr_resolve(&e, 1);
    pr_frame_name(&b, &e->f[0]);
  } else {
    pr_printf(&b, "0x%lx", (unsigned long)(uintptr_t)pc);
  }
  pthread_mutex_unlock(&pr_lock);
  size_t n = b.oom ? 0 : b.len;
  if (buf && len) {
    size_t c = n < len - 1 ? n : len - 1;
    if (c) memcpy(buf, b.p, c);
    buf[c] = '\0';
  }
  free(b.p);
  return n;
}

/* ---- the samples, by site ---- */

typedef struct pr_site {
  uint64_t key;       /* the sampler's site */
  unsigned depth;     /* native frames in pcs, innermost first */
  uintptr_t *pcs;
  char *lang;         /* the language frames as the sampler gave them, or NULL */
  double bytes, blocks, pinned;
  size_t samples;
  /* filled by pr_sites_resolve: */
  pr_pc **nat;        /* the native frames shown, innermost first (the allocator's own left out) */
  unsigned nnat;
  pr_frame *lf;       /* the language frames, innermost first (pointing into lang) */
  unsigned nlf;
} pr_site;

typedef struct pr_sites {
  pr_site *v;         /* [0, n) */
  size_t n, cap;
  size_t *tab;        /* open addressing on key: index + 1 into v, 0 empty; at most half full */
  size_t tab_cap;
  size_t samples;     /* samples visited */
  size_t rate_lo, rate_hi; /* the rates they were taken at */
  bool oom;
} pr_sites;

static bool pr_site_same(const pr_site *s, const scr_profile_sample *x) {
  if (s->key != x->site || s->depth != x->depth) return false;
  for (unsigned i = 0; i < s->depth; i++)
    if (s->pcs[i] != (uintptr_t)x->frames[i]) return false;
  if (!s->lang != !x->lang) return false;
  return s->lang == NULL || strcmp(s->lang, x->lang) == 0;
}

static bool pr_sites_grow(pr_sites *S) {
  if (S->n == S->cap) {
    size_t cap = S->cap ? S->cap * 2 : 64;
    pr_site *v = realloc(S->v, cap * sizeof *v);
    if (v == NULL) return false;
    S->v = v;
    S->cap = cap;
  }
  if ((S->n + 1) * 2 > S->tab_cap) {
    size_t cap = S->tab_cap ? S->tab_cap * 2 : 128;
    size_t *t = calloc(cap, sizeof *t);
    if (t == NULL) return false;
    for (size_t i = 0; i < S->n; i++) {
      size_t j = pr_hash(S->v[i].key) & (cap - 1);
      while (t[j]) j = (j + 1) & (cap - 1);
      t[j] = i + 1;
    }
    free(S->tab);
    S->tab = t;
    S->tab_cap = cap;
  }
  return true;
}

/* scr_profile_samples' visitor: adds one sample to its site. */
static int pr_visit(const scr_profile_sample *x, void *arg) {
  pr_sites *S = arg;
  if (S->oom) return 0;
  S->samples++;
  if (S->rate_lo == 0 || x->rate < S->rate_lo) S->rate_lo = x->rate;
  if (x->rate > S->rate_hi) S->rate_hi = x->rate;
  pr_site *s = NULL;
  if (S->tab_cap) {
    size_t j = pr_hash(x->site) & (S->tab_cap - 1);
    for (; S->tab[j]; j = (j + 1) & (S->tab_cap - 1))
      if (pr_site_same(&S->v[S->tab[j] - 1], x)) {
        s = &S->v[S->tab[j] - 1];
        break;
      }
  }
  if (s == NULL) {
    if (!pr_sites_grow(S)) {
      S->oom = true;
      return 0;
    }
    s = &S->v[S->n];
    memset(s, 0, sizeof *s);
    s->key = x->site;
    s->depth = x->depth;
    s->pcs = malloc((x->depth ? x->depth : 1) * sizeof *s->pcs);
    s->lang = x->lang ? strdup(x->lang) : NULL;
    if (s->pcs == NULL || (x->lang && s->lang == NULL)) {
      free(s->pcs);
      free(s->lang);
      S->oom = true;
      return 0;
    }
    for (unsigned i = 0; i < x->depth; i++) s->pcs[i] = (uintptr_t)x->frames[i];
    size_t j = pr_hash(x->site) & (S->tab_cap - 1);
    while (S->tab[j]) j = (j + 1) & (S->tab_cap - 1);
    S->tab[j] = ++S->n;
  }
  s->bytes += x->bytes;
  s->blocks += x->blocks;
  s->pinned += x->pinned;
  s->samples++;
  return 0;
}

static void pr_sites_free(pr_sites *S) {
  for (size_t i = 0; i < S->n; i++) {
    free(S->v[i].pcs);
    free(S->v[i].lang);
    free(S->v[i].nat);
    free(S->v[i].lf);
  }
  free(S->v);
  free(S->tab);
  memset(S, 0, sizeof *S);
}

/* The allocator's own frames, at the inner end of a stack: those in the
 * module of this code when that is a shared object (the preload library,
 * a binding's module); when the allocator is linked into the program,
 * those up to the outermost scr_* or _scr_* function among the first
 * few (its entry points). */
static bool pr_is_scr_name(const char *s) {
  return s && (strncmp(s, "scr_", 4) == 0 || strncmp(s, "_scr_", 5) == 0);
}

static unsigned pr_own_frames(pr_pc **e, unsigned n, const pr_module *self) {
  unsigned skip = 0;
  if (self && !self->program) {
    while (skip < n && e[skip] && e[skip]->mod == self) skip++;
  } else {
    for (unsigned i = 0; i < n && i < 12; i++)
      if (e[i] && pr_is_scr_name(e[i]->sym)) skip = i + 1;
  }
  return skip < n ? skip : 0; /* a stack of the allocator alone stays whole */
}

/* Splits s->lang ("function\tfile\tline" lines, innermost first) into
 * frames pointing into it. */
static void pr_site_lang(pr_site *s) {
  if (s->lang == NULL || s->lang[0] == '\0') return;
  size_t n = 1;
  for (const char *c = s->lang; *c; c++) n += *c == '\n';
  s->lf = malloc(n * sizeof *s->lf);
  if (s->lf == NULL) return;
  for (char *l = s->lang, *nx; l && *l; l = nx) {
    nx = strchr(l, '\n');
    if (nx) *nx++ = '\0';
    char *file = strchr(l, '\t'), *line = NULL;
    if (file) {
      *file++ = '\0';
      line = strchr(file, '\t');
      if (line) *line++ = '\0';
    }
    if (l[0] == '\0' && (file == NULL || file[0] == '\0')) continue;
    s->lf[s->nlf++] = (pr_frame){l[0] ? l : "?", file && file[0] ? file : NULL,
                                 line ? (unsigned)strtoul(line, NULL, 10) : 0};
  }
}

/* Resolves every site's frames: modules, symbols, file:line (under
 * pr_lock). */
static void pr_sites_resolve(pr_sites *S) {
  pr_module *self = pr_self_module();
  size_t total = 0;
  for (size_t i = 0; i < S->n; i++) total += S->v[i].depth;
  pr_pc **all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (size_t i = 0; i < S->n; i++) {
    pr_site *s = &S->v[i];
    pr_site_lang(s);
    if (s->depth == 0) continue;
    pr_pc **e = malloc(s->depth * sizeof *e);
    if (e == NULL) continue;
    unsigned m = 0;
    for (unsigned j = 0; j < s->depth; j++) {
      pr_pc *p = pr_pc_get(s->pcs[j]);
      if (p) e[m++] = p;
    }
    unsigned skip = pr_own_frames(e, m, self);
    memmove(e, e + skip, (m - skip) * sizeof *e);
    s->nat = e;
    s->nnat = m - skip;
    if (all)
      for (unsigned j = 0; j < s->nnat; j++) all[k++] = e[j];
  }
  if (all) pr_resolve(all, k);
  else
    for (size_t i = 0; i < S->n; i++)
      for (unsigned j = 0; j < S->v[i].nnat; j++) pr_pc_plain(S->v[i].nat[j]);
  free(all);
}

/* Collects the live samples of h into S (not under pr_lock: the visitor
 * only allocates). */
static void pr_sites_collect(pr_sites *S, const scr_heap *h) {
  memset(S, 0, sizeof *S);
  scr_profile_samples(h, pr_visit, S);
}

/* The native frames are shown: always without language frames, with
 * them when asked. */
static bool pr_show_native(const pr_site *s, unsigned format) {
  return s->nlf == 0 || (format & SCR_PROFILE_NATIVE);
}

/* ---- folded stacks ---- */

/* A frame's name for a folded line: no ';' (the separator) and no line
 * break. */
static void pr_folded_name(pr_buf *out, const pr_frame *f) {
  size_t at = out->len;
  pr_frame_name(out, f);
  if (out->oom) return;
  for (size_t i = at; i < out->len; i++) {
    if (out->p[i] == ';') out->p[i] = ',';
    else if (out->p[i] == '\n' || out->p[i] == '\r') out->p[i] = ' ';
  }
}

/* The site's stack, outermost frame first, ';' between frames. */
static void pr_site_stack(pr_buf *out, const pr_site *s, unsigned format) {
  bool first = true;
  for (unsigned i = s->nlf; i-- > 0;) {
    if (!first) pr_putc(out, ';');
    pr_folded_name(out, &s->lf[i]);
    first = false;
  }
  if (!pr_show_native(s, format)) return;
  for (unsigned i = s->nnat; i-- > 0;)
    for (unsigned j = s->nat[i]->n; j-- > 0;) {
      if (!first) pr_putc(out, ';');
      pr_folded_name(out, &s->nat[i]->f[j]);
      first = false;
    }
  if (first) pr_puts(out, "[unknown]");
}

typedef struct pr_line {
  size_t off, len;    /* the stack's text in the buffer */
  double value;
} pr_line;

static __thread const char *pr_sort_text; /* qsort has no context argument */

static int pr_line_cmp(const void *a, const void *b) {
  const pr_line *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(pr_sort_text + x->off, pr_sort_text + y->off, n);
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Folded lines (blame: the pinned bytes) into out, equal stacks merged,
 * sorted by stack; stacks whose value rounds to 0 left out. */
static void pr_folded(pr_buf *out, const pr_sites *S, unsigned format, bool blame) {
  pr_buf text = {0};
  pr_line *lines = malloc((S->n ? S->n : 1) * sizeof *lines);
  if (lines == NULL) {
    out->oom = true;
    return;
  }
  for (size_t i = 0; i < S->n; i++) {
    size_t at = text.len;
    pr_site_stack(&text, &S->v[i], format);
    lines[i] = (pr_line){at, text.len - at, blame ? S->v[i].pinned : S->v[i].bytes};
  }
  if (text.oom) {
    out->oom = true;
  } else {
    pr_sort_text = text.p;
    qsort(lines, S->n, sizeof *lines, pr_line_cmp);
    for (size_t i = 0; i < S->n;) {
      double v = 0;
      size_t j = i;
      while (j < S->n && pr_line_cmp(&lines[i], &lines[j]) == 0) v += lines[j++].value;
      if (pr_round(v) > 0) {
        pr_put(out, text.p + lines[i].off, lines[i].len);
        pr_printf(out, " %llu\n", pr_round(v));
      }
      i = j;
    }
  }
  free(text.p);
  free(lines);
}

/* ---- top sites ---- */

/* Frames of these objects are not where a program allocates: the top
 * table names their caller (strdup, fopen, operator new). */
static bool pr_runtime_module(const pr_module *m) {
  if (m == NULL) return false;
  static const char *const libs[] = {"libc.so", "libstdc++.so", "libgcc_s.so", "ld-linux"};
  for (unsigned i = 0; i < sizeof libs / sizeof libs[0]; i++)
    if (strncmp(m->name, libs[i], strlen(libs[i])) == 0) return true;
  return false;
}

/* The site's name in the top table: its innermost language frame, else
 * its innermost native frame outside the C runtime. */
static void pr_site_name(pr_buf *out, const pr_site *s) {
  if (s->nlf) {
    pr_frame_name(out, &s->lf[0]);
    return;
  }
  if (s->nnat == 0) {
    pr_puts(out, "[unknown]");
    return;
  }
  unsigned i = 0;
  while (i + 1 < s->nnat && pr_runtime_module(s->nat[i]->mod)) i++;
  pr_frame_name(out, &s->nat[i]->f[0]);
}

typedef struct pr_row {
  size_t off, len;    /* the site's name in the text buffer */
  double bytes, blocks, pinned;
  size_t samples;
} pr_row;

static int pr_row_name_cmp(const void *a, const void *b) {
  const pr_row *x = a, *y = b;
  return pr_line_cmp(&(pr_line){x->off, x->len, 0}, &(pr_line){y->off, y->len, 0});
}

static int pr_row_bytes_cmp(const void *a, const void *b) {
  const pr_row *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return pr_row_name_cmp(a, b);
}

/* name (len bytes) in at most max characters (0: no limit): a long
 * "function (file:line)" loses the middle of its file name, keeping the
 * function and the line. */
static void pr_put_cut(pr_buf *out, const char *name, size_t len, size_t max) {
  if (max == 0 || len <= max) {
    pr_put(out, name, len);
    return;
  }
  const char *paren = memchr(name, '(', len);
  size_t head = paren ? (size_t)(paren - name) + 1 : 0;
  if (paren == NULL || head + 12 > max) { /* no file, or no room for one */
    pr_put(out, name, max - 3);
    pr_puts(out, "...");
    return;
  }
  size_t tail = max - head - 3;
  pr_put(out, name, head);
  pr_puts(out, "...");
  pr_put(out, name + len - tail, tail);
}

static double pr_mib(double b) { return b / (1024.0 * 1024.0); }
static double pr_pct(double part, double all) { return all > 0 ? 100.0 * part / all : 0.0; }

/* The top table: `rows` sites by estimated live bytes, then the others
 * and the total (so that each column's percentages add up to 100), each
 * line after prefix; site names cut at name_max characters (0: whole). */
static void pr_top(pr_buf *out, const pr_sites *S, unsigned rows, size_t name_max, const char *prefix) {
  pr_buf text = {0};
  pr_row *r = malloc((S->n ? S->n : 1) * sizeof *r);
  if (r == NULL) {
    out->oom = true;
    return;
  }
  double bytes = 0, blocks = 0, pinned = 0;
  for (size_t i = 0; i < S->n; i++) {
    const pr_site *s = &S->v[i];
    size_t at = text.len;
    pr_site_name(&text, s);
    r[i] = (pr_row){at, text.len - at, s->bytes, s->blocks, s->pinned, s->samples};
    bytes += s->bytes;
    blocks += s->blocks;
    pinned += s->pinned;
  }
  if (text.oom) {
    out->oom = true;
    goto done;
  }
  /* stacks through one site are one row */
  pr_sort_text = text.p;
  qsort(r, S->n, sizeof *r, pr_row_name_cmp);
  size_t n = 0;
  for (size_t i = 0; i < S->n; i++) {
    if (n && pr_row_name_cmp(&r[n - 1], &r[i]) == 0) {
      r[n - 1].bytes += r[i].bytes;
      r[n - 1].blocks += r[i].blocks;
      r[n - 1].pinned += r[i].pinned;
      r[n - 1].samples += r[i].samples;
    } else {
      r[n++] = r[i];
    }
  }
  qsort(r, n, sizeof *r, pr_row_bytes_cmp);
  if (S->rate_lo == S->rate_hi)
    pr_printf(out, "%stop sites of live memory: %zu samples, one per %zu bytes allocated on average\n", prefix,
              S->samples, S->rate_lo);
  else
    pr_printf(out, "%stop sites of live memory: %zu samples, one per %zu to %zu bytes allocated\n", prefix,
              S->samples, S->rate_lo, S->rate_hi);
  pr_printf(out, "%s  live MiB, blocks: estimated from the samples (docs/profile.md)\n", prefix);
  pr_printf(out, "%s  pinned MiB: free bytes of partly used pages that the site's blocks keep\n", prefix);
  pr_printf(out, "%s  %%: share of the total (the rows add up to it)\n", prefix);
  pr_printf(out, "%s live MiB     %%    blocks   pinned     %%  site (innermost frame)\n", prefix);
  unsigned shown = n < rows ? (unsigned)n : rows;
  for (unsigned i = 0; i < shown; i++) {
    pr_printf(out, "%s%9.2f %5.1f %9llu %8.2f %5.1f  ", prefix, pr_mib(r[i].bytes), pr_pct(r[i].bytes, bytes),
              pr_round(r[i].blocks), pr_mib(r[i].pinned), pr_pct(r[i].pinned, pinned));
    pr_put_cut(out, text.p + r[i].off, r[i].len, name_max);
    pr_putc(out, '\n');
  }
  if (n > shown) {
    double ob = 0, ok = 0, op = 0;
    for (size_t i = shown; i < n; i++) ob += r[i].bytes, ok += r[i].blocks, op += r[i].pinned;
    pr_printf(out, "%s%9.2f %5.1f %9llu %8.2f %5.1f  (%zu other sites)\n", prefix, pr_mib(ob), pr_pct(ob, bytes),
              pr_round(ok), pr_mib(op), pr_pct(op, pinned), n - shown);
  }
  pr_printf(out, "%s%9.2f %5.1f %9llu %8.2f %5.1f  total\n", prefix, pr_mib(bytes), bytes > 0 ? 100.0 : 0.0,
            pr_round(blocks), pr_mib(pinned), pinned > 0 ? 100.0 : 0.0);
done:
  free(text.p);
  free(r);
}

/* ---- pprof: perftools.profiles.Profile, protobuf by hand ---- */

static void pb_varint(pr_buf *b, uint64_t v) {
  unsigned char t[10];
  size_t n = 0;
  do {
    t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  pr_put(b, t, n);
}

static void pb_u64(pr_buf *b, unsigned field, uint64_t v) { /* proto3: a zero is left out */
  if (v == 0) return;
  pb_varint(b, (uint64_t)field << 3); /* wire type 0 */
  pb_varint(b, v);
}

static void pb_bytes(pr_buf *b, unsigned field, const void *p, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2); /* wire type 2: length-delimited */
  pb_varint(b, n);
  pr_put(b, p, n);
}

/* Appends the message built in sub as field `field`, and empties sub. */
static void pb_msg(pr_buf *b, unsigned field, pr_buf *sub) {
  if (sub->oom) b->oom = true;
  pb_bytes(b, field, sub->p, sub->len);
  sub->len = 0;
}

/* Maps keys of three words to ids 1, 2, ... (0: none): the string
 * table's hashes, the functions, the locations. */
typedef struct pr_key { uint64_t a, b, c; } pr_key;
typedef struct pr_idmap {
  pr_key *keys;
  uint64_t *ids;      /* 0: an empty slot */
  size_t cap, n;      /* at most half full */
  bool oom;
} pr_idmap;

/* The id of k; a new key gets n + 1 (*fresh set). */
static uint64_t pr_id(pr_idmap *m, pr_key k, bool *fresh) {
  *fresh = false;
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    pr_key *keys = malloc(cap * sizeof *keys);
    uint64_t *ids = calloc(cap, sizeof *ids);
    if (keys == NULL || ids == NULL) {
      free(keys);
      free(ids);
      m->oom = true;
      return 0;
    }
    for (size_t i = 0; i < m->cap; i++) {
      if (m->ids[i] == 0) continue;
      size_t j = pr_hash(m->keys[i].a ^ pr_hash(m->keys[i].b) ^ (m->keys[i].c * 31)) & (cap - 1);
      while (ids[j]) j = (j + 1) & (cap - 1);
      keys[j] = m->keys[i];
      ids[j] = m->ids[i];
    }
    free(m->keys);
    free(m->ids);
    m->keys = keys;
    m->ids = ids;
    m->cap = cap;
  }
  size_t j = pr_hash(k.a ^ pr_hash(k.b) ^ (k.c * 31)) & (m->cap - 1);
  for (; m->ids[j]; j = (j + 1) & (m->cap - 1))
    if (m->keys[j].a == k.a && m->keys[j].b == k.b && m->keys[j].c == k.c) return m->ids[j];
  m->keys[j] = k;
  m->ids[j] = ++m->n;
  *fresh = true;
  return m->ids[j];
}

static void pr_idmap_free(pr_idmap *m) {
  free(m->keys);
  free(m->ids);
}

typedef struct pr_pprof {
  pr_buf out;         /* the Profile's fields but the string table */
  pr_buf strings;     /* the string table's fields */
  pr_buf sub, sub2;   /* messages being built */
  pr_idmap str;       /* (hash, pointer to the text in `texts`, length) -> index + 1 */
  pr_buf texts;       /* the strings, end to end */
  size_t *str_off;    /* by index: offset in texts */
  pr_idmap fn, loc;
  pr_module *maps[PR_MODULES_MAX];
  unsigned nmaps;
} pr_pprof;

static uint64_t pr_str_hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

/* The string table's index of s. */
static int64_t pr_str(pr_pprof *P, const char *s) {
  size_t n = strlen(s);
  uint64_t h = pr_str_hash(s, n);
  /* equal hashes of different strings get different ids through the
   * third word: the first index whose text differs is skipped */
  for (uint64_t salt = 0;; salt++) {
    bool fresh;
    uint64_t id = pr_id(&P->str, (pr_key){h, n, salt}, &fresh);
    if (id == 0) return 0;
    if (fresh) {
      size_t *offs = realloc(P->str_off, id * sizeof *offs);
      if (offs == NULL) {
        P->out.oom = true;
        return 0;
      }
      P->str_off = offs;
      offs[id - 1] = P->texts.len;
      pr_put(&P->texts, s, n + 1);
      pb_bytes(&P->strings, 6, s, n);
      return (int64_t)id - 1;
    }
    if (!P->texts.oom && memcmp(P->texts.p + P->str_off[id - 1], s, n + 1) == 0) return (int64_t)id - 1;
  }
}

static uint64_t pr_mapping(pr_pprof *P, pr_module *m) {
  if (m == NULL) return 0;
  for (unsigned i = 0; i < P->nmaps; i++)
    if (P->maps[i] == m) return i + 1;
  P->maps[P->nmaps++] = m;
  return P->nmaps;
}

/* The id of the Function of frame f (written the first time). */
static uint64_t pr_function(pr_pprof *P, const pr_frame *f) {
  int64_t name = pr_str(P, f->func), file = f->file ? pr_str(P, f->file) : 0;
  bool fresh;
  uint64_t id = pr_id(&P->fn, (pr_key){(uint64_t)name, (uint64_t)file, 0}, &fresh);
  if (fresh) {
    pb_u64(&P->sub2, 1, id);
    pb_u64(&P->sub2, 2, (uint64_t)name);
    pb_u64(&P->sub2, 3, (uint64_t)name);
    pb_u64(&P->sub2, 4, (uint64_t)file);
    pb_msg(&P->out, 5, &P->sub2);
  }
  return id;
}

/* A Line of a Location into P->sub. */
static void pr_line_msg(pr_pprof *P, const pr_frame *f) {
  uint64_t fn = pr_function(P, f);
  pr_buf line = {0};
  pb_u64(&line, 1, fn);
  pb_u64(&line, 2, f->line);
  pb_msg(&P->sub, 4, &line);
  free(line.p);
}

/* The Location of a native return address (its inlined frames as lines,
 * innermost first, as pprof wants them). */
static uint64_t pr_location_pc(pr_pprof *P, pr_pc *e) {
  bool fresh;
  uint64_t id = pr_id(&P->loc, (pr_key){1, e->pc, 0}, &fresh);
  if (fresh) {
    pb_u64(&P->sub, 1, id);
    pb_u64(&P->sub, 2, pr_mapping(P, e->mod));
    pb_u64(&P->sub, 3, e->pc);
    for (unsigned i = 0; i < e->n; i++) pr_line_msg(P, &e->f[i]);
    pb_msg(&P->out, 4, &P->sub);
  }
  return id;
}

/* The Location of a language frame (no address, no mapping). */
static uint64_t pr_location_lang(pr_pprof *P, const pr_frame *f) {
  uint64_t fn = pr_function(P, f);
  bool fresh;
  uint64_t id = pr_id(&P->loc, (pr_key){2, fn, f->line}, &fresh);
  if (fresh) {
    pb_u64(&P->sub, 1, id);
    pr_line_msg(P, f);
    pb_msg(&P->out, 4, &P->sub);
  }
  return id;
}

static void pr_pprof_build(pr_buf *result, const pr_sites *S, unsigned format) {
  pr_pprof *P = calloc(1, sizeof *P);
  if (P == NULL) {
    result->oom = true;
    return;
  }
  pr_str(P, ""); /* string_table[0] */
  int64_t objects = pr_str(P, "inuse_objects"), count = pr_str(P, "count");
  int64_t space = pr_str(P, "inuse_space"), bytes = pr_str(P, "bytes");
  pb_u64(&P->sub, 1, (uint64_t)objects);
  pb_u64(&P->sub, 2, (uint64_t)count);
  pb_msg(&P->out, 1, &P->sub);
  pb_u64(&P->sub, 1, (uint64_t)space);
  pb_u64(&P->sub, 2, (uint64_t)bytes);
  pb_msg(&P->out, 1, &P->sub);
  /* the program first: pprof takes mapping[0] for the main binary */
  for (unsigned i = 0; i < pr_nmodules; i++)
    if (pr_modules[i]->program) pr_mapping(P, pr_modules[i]);
  int64_t pinned_key = pr_str(P, "pinned");
  pr_buf locs = {0}, vals = {0}, sample = {0}, label = {0};
  for (size_t i = 0; i < S->n; i++) {
    const pr_site *s = &S->v[i];
    /* leaf first: the native frames (below the language ones), then the
     * language frames */
    if (pr_show_native(s, format))
      for (unsigned j = 0; j < s->nnat; j++) pb_varint(&locs, pr_location_pc(P, s->nat[j]));
    for (unsigned j = 0; j < s->nlf; j++) pb_varint(&locs, pr_location_lang(P, &s->lf[j]));
    pb_varint(&vals, pr_round(s->blocks));
    pb_varint(&vals, pr_round(s->bytes));
    pb_bytes(&sample, 1, locs.p, locs.len);
    pb_bytes(&sample, 2, vals.p, vals.len);
    pb_u64(&label, 1, (uint64_t)pinned_key);
    pb_u64(&label, 3, pr_round(s->pinned));
    pb_u64(&label, 4, (uint64_t)bytes);
    pb_msg(&sample, 3, &label);
    if (locs.oom || vals.oom) sample.oom = true;
    pb_msg(&P->out, 2, &sample);
    locs.len = vals.len = 0;
  }
  free(locs.p);
  free(vals.p);
  free(sample.p);
  free(label.p);
  for (unsigned i = 0; i < P->nmaps; i++) {
    const pr_module *m = P->maps[i];
    pb_u64(&P->sub, 1, i + 1);
    pb_u64(&P->sub, 2, m->lo);
    pb_u64(&P->sub, 3, m->hi);
    pb_u64(&P->sub, 4, m->file_off);
    pb_u64(&P->sub, 5, (uint64_t)pr_str(P, m->file));
    pb_u64(&P->sub, 7, m->nsyms > 0);
    pb_u64(&P->sub, 8, m->debug && !m->no_addr2line);
    pb_u64(&P->sub, 9, m->debug && !m->no_addr2line);
    pb_u64(&P->sub, 10, m->debug && !m->no_addr2line);
    pb_msg(&P->out, 3, &P->sub);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  pb_u64(&P->out, 9, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
  pb_u64(&P->sub, 1, (uint64_t)pr_str(P, "space"));
  pb_u64(&P->sub, 2, (uint64_t)bytes);
  pb_msg(&P->out, 11, &P->sub);
  pb_u64(&P->out, 12, S->rate_hi);
  pb_u64(&P->out, 14, (uint64_t)space);
  pr_put(result, P->out.p, P->out.len);
  pr_put(result, P->strings.p, P->strings.len);
  if (P->out.oom || P->strings.oom || P->sub.oom || P->sub2.oom || P->texts.oom || P->str.oom || P->fn.oom ||
      P->loc.oom)
    result->oom = true;
  free(P->out.p);
  free(P->strings.p);
  free(P->sub.p);
  free(P->sub2.p);
  free(P->texts.p);
  free(P->str_off);
  pr_idmap_free(&P->str);
  pr_idmap_free(&P->fn);
  pr_idmap_free(&P->loc);
  free(P);
}

/* ---- gzip (RFC 1952) of stored deflate blocks (RFC 1951, BTYPE 00):
 * pprof wants the profile gzipped, not compressed ---- */

static uint32_t pr_crc_table[256]; /* filled once, under pr_lock */

static uint32_t pr_crc32(const unsigned char *p, size_t n) {
  if (pr_crc_table[1] == 0)
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      pr_crc_table[i] = c;
    }
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) c = pr_crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static void pr_le32(pr_buf *b, uint32_t v) {
  unsigned char t[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  pr_put(b, t, 4);
}

static void pr_gzip(pr_buf *out, const pr_buf *in) {
  static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3}; /* deflate, no flags, Unix */
  pr_put(out, head, sizeof head);
  size_t at = 0;
  do {
    size_t n = in->len - at > 65535 ? 65535 : in->len - at;
    bool last = at + n == in->len;
    unsigned char h[5] = {last ? 1 : 0, (unsigned char)n, (unsigned char)(n >> 8), (unsigned char)~n,
                          (unsigned char)(~n >> 8)};
    pr_put(out, h, 5);
    pr_put(out, in->p + at, n);
    at += n;
  } while (at < in->len);
  pr_le32(out, pr_crc32((const unsigned char *)in->p, in->len));
  pr_le32(out, (uint32_t)in->len);
}

/* ---- writing ---- */

/* 0, or -1 with errno. */
static int pr_write_file(const char *path, const pr_buf *b) {
  if (b->oom) {
    errno = ENOMEM;
    return -1;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  for (size_t at = 0; at < b->len;) {
    ssize_t w = write(fd, b->p + at, b->len - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      errno = e;
      return -1;
    }
    at += (size_t)w;
  }
  return close(fd) == 0 ? 0 : -1;
}

/* One report of the (resolved) sites into out. */
static void pr_render(pr_buf *out, const pr_sites *S, unsigned format) {
  switch (format & ~(unsigned)SCR_PROFILE_NATIVE) {
  case SCR_PROFILE_FOLDED: pr_folded(out, S, format, false); break;
  case SCR_PROFILE_BLAME: pr_folded(out, S, format, true); break;
  case SCR_PROFILE_TOP: pr_top(out, S, 20, 0, ""); break;
  case SCR_PROFILE_PPROF: {
    pr_buf raw = {0};
    pr_pprof_build(&raw, S, format);
    if (raw.oom) out->oom = true;
    else pr_gzip(out, &raw);
    free(raw.p);
    break;
  }
  }
}

static bool pr_format_ok(unsigned format) {
  unsigned kind = format & ~(unsigned)SCR_PROFILE_NATIVE;
  return kind >= SCR_PROFILE_FOLDED && kind <= SCR_PROFILE_TOP;
}

int scr_profile_write(const scr_heap *h, const char *path, unsigned format) {
  if (path == NULL || !pr_format_ok(format)) return SCR_EINVAL;
  pr_sites S;
  pr_sites_collect(&S, h);
  pr_buf out = {0};
  pthread_mutex_lock(&pr_lock);
  pr_sites_resolve(&S);
  pr_render(&out, &S, format);
  pthread_mutex_unlock(&pr_lock);
  if (S.oom) out.oom = true;
  pr_sites_free(&S);
  int rc = pr_write_file(path, &out);
  int e = errno;
  free(out.p);
  errno = e;
  return rc == 0 ? SCR_OK : -1;
}

/* ---- at exit ---- */

/* Another copy of scralloc is the process's (a Python or Lua module
 * that carries the library, in a program that also preloads it): the
 * copy whose scr_profile_write the program sees writes SCRALLOC_PROFILE's
 * files, and the others leave them alone rather than write over them. */
static bool pr_other_copy_writes(void) {
  void *global = dlsym(RTLD_DEFAULT, "scr_profile_write");
  Dl_info g, me;
  if (global == NULL || !dladdr(global, &g) || !dladdr((void *)pr_self_module, &me)) return false;
  return g.dli_fbase != me.dli_fbase;
}

/* SCRALLOC_PROFILE as it was when the library was loaded: a program
 * that drops it from its environment (so that the processes it starts
 * do not write profiles of their own) still gets its files. */
static char pr_exit_path[4096];

/* A fork's child starts with fresh caches and an unlocked pr_lock: a
 * report in another thread of the parent may have held the lock, and
 * left the caches half-changed, at the fork (the parent's caches stay
 * mapped in the child, unused). */
static void pr_after_fork_child(void) {
  pthread_mutex_init(&pr_lock, NULL);
  pr_nmodules = 0;
  pr_pcs = NULL;
  pr_pcs_cap = pr_pcs_n = 0;
  pr_keep_at = pr_keep_end = NULL;
  memset(pr_crc_table, 0, sizeof pr_crc_table);
}

__attribute__((constructor)) static void pr_read_env(void) {
  const char *env = getenv("SCRALLOC_PROFILE");
  if (env && strlen(env) < sizeof pr_exit_path) strcpy(pr_exit_path, env);
  pthread_atfork(NULL, NULL, pr_after_fork_child);
}

void _scr_profile_at_exit(void) {
  const char *env = pr_exit_path[0] ? pr_exit_path : getenv("SCRALLOC_PROFILE");
  if (env == NULL || env[0] == '\0' || pr_other_copy_writes()) return;
  /* "%p" in the path is the process id: the processes of one program
   * that inherit the variable each write their own files */
  char path[4096];
  size_t n = 0;
  for (const char *c = env; *c && n < sizeof path - 64; c++) {
    if (c[0] == '%' && c[1] == 'p') {
      n += (size_t)snprintf(path + n, sizeof path - n, "%d", (int)getpid());
      c++;
    } else {
      path[n++] = *c;
    }
  }
  path[n] = '\0';
  static const struct { const char *suffix; unsigned format; } files[] = {
    {"", SCR_PROFILE_FOLDED | SCR_PROFILE_NATIVE},
    {".pb.gz", SCR_PROFILE_PPROF | SCR_PROFILE_NATIVE},
    {".blame", SCR_PROFILE_BLAME | SCR_PROFILE_NATIVE},
  };
  pr_sites S;
  pr_sites_collect(&S, NULL);
  pthread_mutex_lock(&pr_lock);
  pr_sites_resolve(&S);
  pthread_mutex_unlock(&pr_lock);
  for (unsigned i = 0; i < sizeof files / sizeof files[0]; i++) {
    char name[4096 + 16];
    snprintf(name, sizeof name, "%s%s", path, files[i].suffix);
    pr_buf out = {0};
    pthread_mutex_lock(&pr_lock);
    pr_render(&out, &S, files[i].format);
    pthread_mutex_unlock(&pr_lock);
    if (S.oom) out.oom = true;
    if (pr_write_file(name, &out) != 0) {
      char msg[4096 + 128];
      int len = snprintf(msg, sizeof msg, "scralloc: SCRALLOC_PROFILE: cannot write %s: %s\n", name, strerror(errno));
      if (len > 0) {
        ssize_t w = write(STDERR_FILENO, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
        (void)w;
      }
    }
    free(out.p);
  }
  pr_sites_free(&S);
}

void _scr_profile_report_top(int fd, int pid, unsigned rows) {
  pr_sites S;
  pr_sites_collect(&S, NULL);
  if (S.samples == 0) {
    pr_sites_free(&S);
    return;
  }
  char prefix[40];
  snprintf(prefix, sizeof prefix, "scralloc[%d]: ", pid);
  pr_buf out = {0};
  pthread_mutex_lock(&pr_lock);
  pr_sites_resolve(&S);
  /* report lines stay under 100 characters: 44 before the name */
  size_t room = 99 - strlen(prefix) - 44;
  pr_top(&out, &S, rows, room, prefix);
  pthread_mutex_unlock(&pr_lock);
  pr_sites_free(&S);
  for (size_t at = 0; !out.oom && at < out.len;) {
    ssize_t w = write(fd, out.p + at, out.len - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    at += (size_t)w;
  }
  free(out.p);
}
