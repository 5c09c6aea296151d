/* glibc's statistics calls in libscralloc.so (built with SCR_OVERRIDE=1):
 * mallinfo2, mallinfo, malloc_stats and malloc_info report scralloc's
 * figures (stats.c), so that a program printing them under LD_PRELOAD does
 * not read glibc's idle arenas.
 * Layer: observers (beside stats.c, whose figures they print); owns
 * nothing. */
#include "observers.h"

#if SCR_OVERRIDE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <string.h>
#include <unistd.h>

#define SCR_EXPORT __attribute__((visibility("default")))

static inline int proc_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* Bytes held for blocks that no live block uses (heap_total less
 * heap_used; the two are summed at different moments, hence the floor). */
static uint64_t proc_held_free(const struct scr_stats *st) {
  return st->heap_total > st->heap_used ? st->heap_total - st->heap_used : 0;
}

/* mallinfo2's fields as glibc fills them, where scralloc
 * has a counterpart: arena, the bytes held for blocks (heap_total);
 * uordblks, the bytes of live blocks (heap_used); fordblks, the rest of
 * arena; hblks and hblkhd, the live blocks above the size classes and
 * their bytes (also in arena and uordblks).  The counts of free chunks
 * (ordblks, smblks), the fastbin figures and keepcost have none: 0. */
SCR_EXPORT struct mallinfo2 mallinfo2(void) {
  struct scr_stats st;
  scr_stats(&st);
  struct mallinfo2 m;
  memset(&m, 0, sizeof m);
  m.arena = st.heap_total;
  m.uordblks = st.heap_used;
  m.fordblks = proc_held_free(&st);
  m.hblks = st.large_allocs;
  m.hblkhd = st.large_bytes;
  return m;
}
/* The same in int fields (glibc's older call), clamped to INT_MAX. */
SCR_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m;
  memset(&m, 0, sizeof m);
  m.arena = proc_int(m2.arena);
  m.uordblks = proc_int(m2.uordblks);
  m.fordblks = proc_int(m2.fordblks);
  m.hblks = proc_int(m2.hblks);
  m.hblkhd = proc_int(m2.hblkhd);
  return m;
}
/* scralloc's report on stderr, a line for each arena included (what
 * SCRALLOC_STATS=2 prints at exit). */
SCR_EXPORT void malloc_stats(void) {
  _scr_proc_init();
  _scr_proc_report(STDERR_FILENO, true);
}

/* One <heap> or the process's totals of malloc_info: scr_stats figures
 * under glibc's element names where the meaning is the same (system
 * current: bytes held for blocks; aspace total: address space mapped;
 * total mmap: blocks above the size classes), scralloc's own otherwise. */
static void proc_info_totals(FILE *fp, const struct scr_stats *st) {
  fprintf(fp, "<total type=\"used\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)st->allocs,
          (unsigned long long)st->heap_used);
  fprintf(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)st->large_allocs,
          (unsigned long long)st->large_bytes);
  fprintf(fp, "<total type=\"rest\" size=\"%llu\"/>\n", (unsigned long long)proc_held_free(st));
  fprintf(fp, "<total type=\"retained\" count=\"%llu\" size=\"%llu\"/>\n",
          (unsigned long long)st->retained_pages, (unsigned long long)st->retained_bytes);
  fprintf(fp, "<total type=\"dirty\" size=\"%llu\"/>\n", (unsigned long long)st->dirty_bytes);
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", (unsigned long long)st->heap_total);
  fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", (unsigned long long)st->reserved_bytes);
}

/* glibc's XML report, with scralloc's figures (version "scralloc-1"): a
 * <heap> per arena, its size classes that hold pages (live blocks,
 * pages, empty pages kept), then the process's totals.  As glibc's:
 * options must be 0 (else EINVAL), and -1 on an error. */
SCR_EXPORT int malloc_info(int options, FILE *fp) {
  if (options != 0 || fp == NULL) {
    errno = EINVAL;
    return -1;
  }
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  fputs("<malloc version=\"scralloc-1\">\n", fp);
  for (unsigned i = 0; i < ps.arenas; i++) {
    struct scr_stats st;
    if (scr_arena_stats(i, &st) != SCR_OK) continue;
    fprintf(fp, "<heap nr=\"%u\">\n<classes>\n", i);
    for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
      const scr_class_stats *k = &st.classes[c];
      if (k->pages == 0) continue;
      fprintf(fp, "<class size=\"%llu\" live=\"%llu\" pages=\"%llu\" retained=\"%llu\"/>\n",
              (unsigned long long)k->block_size, (unsigned long long)k->live, (unsigned long long)k->pages,
              (unsigned long long)k->retained);
    }
    fputs("</classes>\n", fp);
    proc_info_totals(fp, &st);
    fputs("</heap>\n", fp);
  }
  struct scr_stats all;
  scr_stats(&all);
  proc_info_totals(fp, &all);
  fputs("</malloc>\n", fp);
  return ferror(fp) ? -1 : 0;
}
#endif /* SCR_OVERRIDE */
