/* Breadth suite: a single-threaded program of the kind compilers and
 * interpreters are.  It "compiles" units of random statements: each token
 * is a fresh string, identifiers are interned in a long-lived symbol table
 * (the token is freed when the name is known), each statement becomes an
 * expression tree that is evaluated into boxed temporaries and short
 * strings, and then dropped; a few trees live on as "functions" (a table of
 * 64, an entry replaced now and then), and each unit grows a constant pool
 * with realloc.  Many short-lived small objects around a few long-lived
 * trees.
 *
 *     proc_interp [units] [statements per unit] */
#include <stdio.h>

#include "suite_prog.h"

struct sym { /* interned identifier: lives to the end */
  struct sym *next;
  double value;
  char name[];
};
enum kind { NUM, VAR, STR, ADD, MUL, CAT, LEN };
struct node { /* expression tree */
  enum kind kind;
  struct node *a, *b;
  double num;
  struct sym *sym;
  char *str;
};
struct value { /* a boxed temporary */
  int is_str;
  double num;
  char *str;
};

#define BUCKETS 4096
static struct sym *symtab[BUCKETS];
static size_t symbols;
static struct node *functions[64];
static uint64_t seed = 1;

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Takes the token; returns the interned symbol (the token is freed when the
 * name was already known, or becomes the symbol's name). */
static struct sym *intern(char *tok) {
  uint64_t h = hash(tok) % BUCKETS;
  for (struct sym *s = symtab[h]; s; s = s->next)
    if (strcmp(s->name, tok) == 0) {
      free(tok);
      return s;
    }
  size_t n = strlen(tok) + 1;
  struct sym *s = must(malloc(sizeof *s + n));
  memcpy(s->name, tok, n);
  free(tok);
  s->value = (double)(symbols++ % 97);
  s->next = symtab[h];
  symtab[h] = s;
  return s;
}

static char *token(const char *fmt, unsigned long v) {
  char buf[64];
  int n = snprintf(buf, sizeof buf, fmt, v);
  char *t = must(malloc((size_t)n + 1));
  memcpy(t, buf, (size_t)n + 1);
  return t;
}

static struct node *parse(int depth) {
  struct node *n = must(calloc(1, sizeof *n));
  uint64_t r = rnd(&seed) % 100;
  if (depth == 0 || r < 25) {
    uint64_t leaf = rnd(&seed) % 10;
    if (leaf < 5) {
      n->kind = VAR;
      n->sym = intern(token("name_%lu", (unsigned long)(rnd(&seed) % 20000)));
    } else if (leaf < 8) {
      char *t = token("%lu", (unsigned long)(rnd(&seed) % 1000));
      n->kind = NUM;
      n->num = strtod(t, NULL);
      free(t);
    } else {
      n->kind = STR;
      n->str = token("\"literal %lu\"", (unsigned long)(rnd(&seed) % 100000));
    }
    return n;
  }
  n->kind = r < 50 ? ADD : r < 75 ? MUL : r < 92 ? CAT : LEN;
  n->a = parse(depth - 1);
  if (n->kind != LEN) n->b = parse(depth - 1);
  return n;
}

static void drop(struct node *n) {
  if (!n) return;
  drop(n->a);
  drop(n->b);
  free(n->str);
  free(n);
}

static struct value *box_num(double v) {
  struct value *x = must(malloc(sizeof *x));
  *x = (struct value){0, v, NULL};
  return x;
}

static void release(struct value *v) {
  free(v->str);
  free(v);
}

static char *as_text(struct value *v) {
  if (v->is_str) {
    char *s = v->str;
    v->str = NULL;
    return s;
  }
  return token("%lu", (unsigned long)v->num);
}

static struct value *eval(const struct node *n) {
  switch (n->kind) {
  case NUM: return box_num(n->num);
  case VAR: return box_num(n->sym->value);
  case STR: {
    struct value *x = box_num(0);
    x->is_str = 1;
    size_t len = strlen(n->str) + 1;
    x->str = must(malloc(len));
    memcpy(x->str, n->str, len);
    return x;
  }
  case LEN: {
    struct value *a = eval(n->a);
    char *t = as_text(a);
    struct value *x = box_num((double)strlen(t));
    free(t);
    release(a);
    return x;
  }
  default: {
    struct value *a = eval(n->a), *b = eval(n->b), *x;
    if (n->kind == CAT) {
      char *s = as_text(a), *t = as_text(b);
      size_t ls = strlen(s), lt = strlen(t);
      if (ls + lt > 200) lt = ls > 200 ? 0 : 200 - ls; /* keep strings short */
      x = box_num(0);
      x->is_str = 1;
      x->str = must(malloc(ls + lt + 1));
      memcpy(x->str, s, ls);
      memcpy(x->str + ls, t, lt);
      x->str[ls + lt] = 0;
      free(s);
      free(t);
    } else {
      double u = a->is_str ? (double)strlen(a->str) : a->num, v = b->is_str ? (double)strlen(b->str) : b->num;
      x = box_num(n->kind == ADD ? u + v : (u * v > 1e9 ? 1 : u * v));
    }
    release(a);
    release(b);
    return x;
  }
  }
}

int main(int argc, char **argv) {
  prog_usage = "[units] [statements per unit]";
  long units = arg_num(argc, argv, 1, 200, 1, 100000000, "units");
  long stmts = arg_num(argc, argv, 2, 2000, 1, 100000000, "statements per unit");
  double check = 0;
  for (long u = 0; u < units; u++) {
    double *pool = NULL; /* the unit's constant pool, grown as it goes */
    size_t npool = 0, cap = 0;
    for (long k = 0; k < stmts; k++) {
      struct node *tree = parse(1 + (int)(rnd(&seed) % 6));
      struct value *v = eval(tree);
      check += v->is_str ? (double)strlen(v->str) : v->num;
      if (npool == cap) pool = must(realloc(pool, (cap = cap ? cap * 2 : 8) * sizeof *pool));
      pool[npool++] = v->num;
      release(v);
      if (rnd(&seed) % 100 < 2) { /* kept as a function: a long-lived tree */
        struct node **f = &functions[rnd(&seed) % 64];
        drop(*f);
        *f = tree;
      } else {
        drop(tree);
      }
    }
    free(pool);
  }
  for (int i = 0; i < 64; i++) drop(functions[i]);
  for (int i = 0; i < BUCKETS; i++)
    for (struct sym *s = symtab[i], *nx; s; s = nx) nx = s->next, free(s);
  printf("interp units=%ld symbols=%zu check=%.0f\n", units, symbols, check);
  return 0;
}
