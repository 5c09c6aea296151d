/* scralloc._scralloc: the CPython binding of scralloc's allocator objects.
 *
 * This file uses only the public header, scralloc.h, as lauxlib.c uses only
 * Lua's official API.  Conventions (those of CPython's own extension
 * modules, Modules/mmapmodule.c for one):
 *  - multi-phase initialization (PEP 489); the types and exceptions live in
 *    the module state, so every interpreter that imports the module gets its
 *    own;
 *  - heap types created with PyType_FromModuleAndSpec, no static types;
 *  - no Argument Clinic: arguments are parsed by hand (METH_O, METH_FASTCALL);
 *  - raw memory is exposed as in Modules/mmapmodule.c: a memoryview over a
 *    block is backed by a Block object whose bf_getbuffer/bf_releasebuffer
 *    count exports, and free, realloc and close of a block (or allocator)
 *    with live exports raise BufferError instead of leaving a dangling view.
 *
 * Every address that comes from Python goes through the checked calls
 * (scr_heap_free_checked, scr_heap_realloc_checked, ...), so a bad address
 * is an exception, never a crash.
 *
 * Ownership:
 *   Allocator.views  : dict  address(int) -> Block, holding exactly the
 *                      Blocks with exports > 0 (strong refs);
 *   Block.alloc      : strong ref, so the heap outlives every view.
 * Invariant: Allocator.views is empty  <=>  no memoryview points into the
 * heap; close() and free()/realloc() of a viewed block are refused otherwise.
 * The cycle Allocator -> views -> Block -> Allocator exists only while a
 * buffer is exported and is broken when the last export is released (or by
 * the GC through Allocator's tp_clear).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <frameobject.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "scralloc.h"
#include "_serve.h"

#if defined(SCR_OVERRIDE) && SCR_OVERRIDE
#error "the Python extension must not replace malloc (SCR_OVERRIDE)"
#endif

#ifndef SCR_DEBUG
#define SCR_DEBUG 0
#endif

/* The process allocator (scr_malloc, scr_stats()) is optional: setup.py
 * defines SCR_HAVE_PROCESS when the header declares scr_stats(). */
#ifndef SCR_HAVE_PROCESS
#define SCR_HAVE_PROCESS 0
#endif

/* ---- module state -------------------------------------------------- */

typedef struct AllocatorObject AllocatorObject;

typedef struct {
  PyTypeObject *Allocator_type;  /* scralloc.Allocator */
  PyTypeObject *Block_type;      /* scralloc._scralloc.Block (backs views) */
  PyObject *InvalidPointerError; /* ValueError subclass */
  PyObject *DoubleFreeError;     /* InvalidPointerError subclass */
  AllocatorObject *open;         /* open allocators (borrowed), for memory_usage */
} module_state;

struct AllocatorObject {
  PyObject_HEAD
  scr_heap *heap;               /* NULL once closed */
  PyObject *views;              /* dict: address -> Block with exports > 0 */
  PyObject *weakreflist;        /* weak references */
  AllocatorObject *next;        /* next open allocator of the module */
  AllocatorObject **pprev;      /* link that points at this one; NULL when unlinked */
  int initialized;              /* __init__ (or from_env) opened the heap once */
  int closing;                  /* __exit__ ran with views alive: the heap goes with the last one */
  scr_py_record *rec;           /* _serve.c's record: lock, peak, serve_python */
};

/* A block exposed to the buffer protocol.  A Block lives for one run of
 * exports: once its last export is released it is dead and refuses new
 * ones, so a stale Block can never expose a later block at the same
 * address. */
typedef struct {
  PyObject_HEAD
  AllocatorObject *alloc;       /* strong */
  PyObject *key;                /* the address as an int (key in alloc->views) */
  uintptr_t addr;               /* start of the block */
  Py_ssize_t len;               /* usable size when the view was made */
  Py_ssize_t exports;           /* live Py_buffers */
  int dead;                     /* exports went back to 0: no new exports */
} BlockObject;

static inline module_state *
get_state(PyObject *module)
{
  void *st = PyModule_GetState(module);
  assert(st != NULL);
  return (module_state *)st;
}

static inline module_state *
type_state(PyTypeObject *tp)
{
  void *st = PyType_GetModuleState(tp);
  assert(st != NULL);
  return (module_state *)st;
}

/* ---- errors -------------------------------------------------------- */

/* An address in hex, 0 as 0x0 ("%p" prints NULL as "(nil)" on glibc). */
#define ADDR_TEXT_LEN 24
static const char *
addr_text(char buf[ADDR_TEXT_LEN], uintptr_t addr)
{
  PyOS_snprintf(buf, ADDR_TEXT_LEN, "0x%llx", (unsigned long long)addr);
  return buf;
}

static const char *
reason_of(int err)
{
  switch (err) {
  case SCR_EFOREIGN: return "foreign";
  case SCR_EINTERIOR: return "interior";
  case SCR_ENOTALLOC: return "not allocated";
  case SCR_EDOUBLEFREE: return "double free";
  case SCR_PY_EPYTHON: return "python";
  default: return "unknown";
  }
}

static const char *
strerror_of(int err)
{
  const char *s = scr_strerror(err);
  return s != NULL ? s : "unknown scralloc error";
}

/* Raise the exception for a checked call's error code; returns NULL. */
static PyObject *
raise_scr(module_state *st, int err, const char *op, uintptr_t addr)
{
  PyObject *type, *msg, *exc, *val;
  char at[ADDR_TEXT_LEN];

  switch (err) {
  case SCR_ENOMEM:
    PyErr_Format(PyExc_MemoryError, "%s: %s", op, strerror_of(err));
    return NULL;
  case SCR_EINVAL:
    PyErr_Format(PyExc_ValueError, "%s: %s", op, strerror_of(err));
    return NULL;
  case SCR_EFOREIGN:
  case SCR_EINTERIOR:
  case SCR_ENOTALLOC:
    type = st->InvalidPointerError;
    break;
  case SCR_EDOUBLEFREE:
    type = st->DoubleFreeError;
    break;
  case SCR_PY_EPYTHON:
    type = st->InvalidPointerError;
    break;
  default:
    PyErr_Format(PyExc_SystemError, "%s: unexpected scralloc error %d", op, err);
    return NULL;
  }
  if (err == SCR_PY_EPYTHON)
    msg = PyUnicode_FromFormat("%s(%s): a block of Python's objects (made under serve_python()); "
                               "Python frees it with its object", op, addr_text(at, addr));
  else
    msg = PyUnicode_FromFormat("%s(%s): %s", op, addr_text(at, addr), strerror_of(err));
  if (msg == NULL)
    return NULL;
  exc = PyObject_CallOneArg(type, msg);
  Py_DECREF(msg);
  if (exc == NULL)
    return NULL;
  val = PyLong_FromUnsignedLongLong((unsigned long long)addr);
  if (val == NULL || PyObject_SetAttrString(exc, "address", val) < 0)
    goto fail;
  Py_DECREF(val);
  val = PyUnicode_FromString(reason_of(err));
  if (val == NULL || PyObject_SetAttrString(exc, "reason", val) < 0)
    goto fail;
  Py_DECREF(val);
  val = PyLong_FromLong(err == SCR_PY_EPYTHON ? SCR_EFOREIGN : err);
  if (val == NULL || PyObject_SetAttrString(exc, "code", val) < 0)
    goto fail;
  Py_DECREF(val);
  PyErr_SetObject(type, exc);
  Py_DECREF(exc);
  return NULL;
fail:
  Py_XDECREF(val);
  Py_DECREF(exc);
  return NULL;
}

/* The core's reports (a SCRALLOC_* value it ignores, a failed munmap, the
 * validator's findings) become Python warnings of category
 * scralloc.ScrallocWarning (a RuntimeWarning) instead of lines on fd 2.
 * The handler is process-wide (this extension's copy of the core is its
 * own), set at import, and may run on any thread: on one that holds the
 * GIL (a call from Python) it warns at once; on one without it (a thread
 * of the core's own) it takes the GIL first.  (The only such thread, the
 * process allocator's helper, starts from scr_malloc's paths, which this
 * binding never calls, so no core lock is held while one waits for the
 * GIL.)  Once the interpreter is finalizing the report goes to stderr, as
 * the core would write it.
 *
 * A warning made an error by a filter cannot leave a void callback: it
 * is written as unraisable, except inside a call that asked for it
 * (report_raises), which then raises it. */
static _Thread_local int report_raises;

/* The pending exception, taken (NULL if none) and put back. */
static PyObject *
exc_take(void)
{
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (type == NULL)
    return NULL;
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb != NULL && value != NULL)
    PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
#endif
}

static void
exc_put(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  if (exc != NULL)
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

static int
thread_holds_gil(void)
{
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked() != NULL;
#elif PY_VERSION_HEX >= 0x030C0000
  return _PyThreadState_UncheckedGet() != NULL;  /* thread-local since 3.12 */
#else
  return PyGILState_Check();
#endif
}

static int
interpreter_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

static void
report_to_warnings(int err, const char *msg, void *arg)
{
  PyGILState_STATE gil = PyGILState_UNLOCKED;
  int ensured = 0;
  PyObject *name, *mod, *category = NULL, *pending;

  if (!Py_IsInitialized() || interpreter_finalizing()) {
    fprintf(stderr, "scralloc: %s (%s)\n", msg, strerror_of(err));
    return;
  }
  if (!thread_holds_gil()) {
    gil = PyGILState_Ensure();
    ensured = 1;
  }
  pending = exc_take();
  /* This interpreter's category (each one that imports has its own). */
  name = PyUnicode_FromString("scralloc._scralloc");
  mod = name != NULL ? PyImport_GetModule(name) : NULL;
  Py_XDECREF(name);
  if (mod != NULL) {
    category = PyObject_GetAttrString(mod, "ScrallocWarning");
    Py_DECREF(mod);
  }
  PyErr_Clear();
  if (PyErr_WarnFormat(category != NULL ? category : PyExc_RuntimeWarning, 1, "scralloc: %s",
                       msg) < 0) {
    if (report_raises && pending == NULL)
      pending = exc_take();  /* the caller raises it */
    else if (report_raises)
      PyErr_Clear();  /* the caller raises the first one */
    else
      PyErr_WriteUnraisable(NULL);
  }
  Py_XDECREF(category);
  exc_put(pending);
  if (ensured)
    PyGILState_Release(gil);
}

/* An unchecked allocation call returned NULL: errno says why. */
static PyObject *
raise_errno(module_state *st, int saved_errno, const char *op)
{
  return raise_scr(st, saved_errno == EINVAL ? SCR_EINVAL : SCR_ENOMEM, op, 0);
}

/* ---- argument conversion ------------------------------------------- */

/* An address: any int-like; an int that cannot be an address at all
 * (negative, wider than a pointer) is an InvalidPointerError. */
static int
get_addr(module_state *st, PyObject *arg, const char *op, uintptr_t *out)
{
  PyObject *idx = PyNumber_Index(arg);
  unsigned long long v;

  if (idx == NULL)
    return -1;
  v = PyLong_AsUnsignedLongLong(idx);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
      Py_DECREF(idx);
      return -1;
    }
    PyErr_Clear();
    PyErr_Format(st->InvalidPointerError, "%s(%R): not an address", op, idx);
    Py_DECREF(idx);
    return -1;
  }
  Py_DECREF(idx);
  if (v > (unsigned long long)UINTPTR_MAX) {
    PyErr_Format(st->InvalidPointerError, "%s(%llu): not an address", op, v);
    return -1;
  }
  *out = (uintptr_t)v;
  return 0;
}

/* A size: ValueError if negative, OverflowError above PY_SSIZE_T_MAX
 * (no block can be viewed beyond that). */
static int
get_size(PyObject *arg, const char *op, const char *what, size_t *out)
{
  PyObject *idx = PyNumber_Index(arg);
  int overflow = 0;
  long long v;

  if (idx == NULL)
    return -1;
  v = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (overflow < 0 || (overflow == 0 && v < 0)) {
    PyErr_Format(PyExc_ValueError, "%s: %s must be >= 0", op, what);
    return -1;
  }
  if (overflow > 0 || (unsigned long long)v > (unsigned long long)PY_SSIZE_T_MAX) {
    PyErr_Format(PyExc_OverflowError, "%s: %s is too large", op, what);
    return -1;
  }
  *out = (size_t)v;
  return 0;
}

static int
check_nargs(const char *op, Py_ssize_t nargs, Py_ssize_t want)
{
  if (nargs == want)
    return 0;
  PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd argument%s (%zd given)",
               op, want, want == 1 ? "" : "s", nargs);
  return -1;
}

static PyObject *
addr_result(void *p)
{
  return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

/* ---- options (one keyword per entry of SCR_OPTIONS) --------------- */

typedef struct {
  const char *name;             /* keyword and option name */
  unsigned long long def;       /* default */
  unsigned long long lo, hi;    /* accepted range, inclusive */
  const char *doc;              /* one line */
} option_desc;

static const option_desc option_table[] = {
#define X(type, name, def, lo, hi, doc) \
  {#name, (unsigned long long)(def), (unsigned long long)(lo), (unsigned long long)(hi), doc},
  SCR_OPTIONS(X)
#undef X
};
#define OPTION_COUNT (sizeof(option_table) / sizeof(option_table[0]))

static void
option_put(scr_options *o, size_t i, unsigned long long v)
{
  size_t k = 0;
#define X(type, name, def, lo, hi, doc) \
  if (i == k++) {                       \
    o->name = (type)v;                  \
    return;                             \
  }
  SCR_OPTIONS(X)
#undef X
}

static unsigned long long
option_get(const scr_options *o, size_t i)
{
  size_t k = 0;
#define X(type, name, def, lo, hi, doc) \
  if (i == k++)                         \
    return (unsigned long long)o->name;
  SCR_OPTIONS(X)
#undef X
  return 0;
}

/* Apply keyword arguments to *opt; TypeError for an unknown keyword,
 * ValueError/OverflowError for a value out of the option's range. */
static int
options_from_kwargs(PyObject *kwds, scr_options *opt)
{
  Py_ssize_t pos = 0;
  PyObject *key, *value;

  if (kwds == NULL)
    return 0;
  while (PyDict_Next(kwds, &pos, &key, &value)) {
    const char *name = PyUnicode_AsUTF8(key);
    size_t i;
    PyObject *idx;
    int overflow = 0;
    long long v;

    if (name == NULL)
      return -1;
    for (i = 0; i < OPTION_COUNT; i++)
      if (strcmp(name, option_table[i].name) == 0)
        break;
    if (i == OPTION_COUNT) {
      PyErr_Format(PyExc_TypeError, "Allocator() got an unexpected keyword argument '%s'",
                   name);
      return -1;
    }
    idx = PyNumber_Index(value);
    if (idx == NULL)
      return -1;
    v = PyLong_AsLongLongAndOverflow(idx, &overflow);
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(idx);
      return -1;
    }
    if (overflow < 0 || (overflow == 0 && v < 0)) {
      Py_DECREF(idx);
      PyErr_Format(PyExc_ValueError, "Allocator(): %s must be >= 0", name);
      return -1;
    }
    if (overflow > 0) {
      unsigned long long u = PyLong_AsUnsignedLongLong(idx);
      Py_DECREF(idx);
      if (u == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
      if (u < option_table[i].lo || u > option_table[i].hi)
        goto range;
      option_put(opt, i, u);
      continue;
    }
    Py_DECREF(idx);
    if ((unsigned long long)v < option_table[i].lo || (unsigned long long)v > option_table[i].hi)
      goto range;
    option_put(opt, i, (unsigned long long)v);
    continue;
  range:
    PyErr_Format(PyExc_ValueError, "Allocator(): %s must be between %llu and %llu", name,
                 option_table[i].lo, option_table[i].hi);
    return -1;
  }
  return 0;
}

static PyObject *
options_to_dict(const scr_options *opt)
{
  PyObject *d = PyDict_New();
  size_t i;

  if (d == NULL)
    return NULL;
  for (i = 0; i < OPTION_COUNT; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(option_get(opt, i));
    if (v == NULL || PyDict_SetItemString(d, option_table[i].name, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

/* ---- stats (fields from SCR_STATS_FIELDS / SCR_CLASS_STATS_FIELDS) - */

static int
put_u64(PyObject *d, const char *name, uint64_t value)
{
  PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)value);
  int r;

  if (v == NULL)
    return -1;
  r = PyDict_SetItemString(d, name, v);
  Py_DECREF(v);
  return r;
}

static PyObject *
class_stats_to_dict(const scr_class_stats *c)
{
  PyObject *d = PyDict_New();

  if (d == NULL)
    return NULL;
#define X(name, doc)                       \
  if (put_u64(d, #name, c->name) < 0) {    \
    Py_DECREF(d);                          \
    return NULL;                           \
  }
  SCR_CLASS_STATS_FIELDS(X)
#undef X
  return d;
}

static PyObject *
stats_to_dict(const struct scr_stats *s)
{
  PyObject *d = PyDict_New(), *classes = NULL;
  unsigned i;

  if (d == NULL)
    return NULL;
#define X(name, doc)                       \
  if (put_u64(d, #name, s->name) < 0)      \
    goto fail;
  SCR_STATS_FIELDS(X)
#undef X
  /* heap_total == heap_used + busy_free_bytes + retained_bytes +
   * dirty_bytes + cached_bytes: the part no other figure names */
  {
    uint64_t named = s->heap_used + s->retained_bytes + s->dirty_bytes + s->cached_bytes;
    if (put_u64(d, "busy_free_bytes", s->heap_total > named ? s->heap_total - named : 0) < 0)
      goto fail;
  }
  classes = PyList_New(SCR_CLASS_COUNT);
  if (classes == NULL)
    goto fail;
  for (i = 0; i < SCR_CLASS_COUNT; i++) {
    PyObject *c = class_stats_to_dict(&s->classes[i]);
    if (c == NULL)
      goto fail;
    PyList_SET_ITEM(classes, i, c);
  }
  if (PyDict_SetItemString(d, "classes", classes) < 0)
    goto fail;
  Py_DECREF(classes);
  return d;
fail:
  Py_XDECREF(classes);
  Py_DECREF(d);
  return NULL;
}

/* ---- Block: the exporter behind Allocator.view() ------------------- */

static long long allocator_destroy(AllocatorObject *a);

static int
Block_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
  BlockObject *b = (BlockObject *)op;

  if (b->dead || b->alloc->heap == NULL || b->alloc->closing || b->alloc->views == NULL) {
    PyErr_SetString(PyExc_BufferError,
                    "this view of a scralloc block has expired; call Allocator.view() again");
    view->obj = NULL;
    return -1;
  }
  if (b->exports == 0 && PyDict_SetItem(b->alloc->views, b->key, op) < 0) {
    view->obj = NULL;
    return -1;
  }
  if (PyBuffer_FillInfo(view, op, (void *)b->addr, b->len, 0, flags) < 0) {
    if (b->exports == 0)
      b->dead = 1;  /* cannot happen (writable); keep views consistent anyway */
    return -1;
  }
  b->exports++;
  return 0;
}

static void
Block_releasebuffer(PyObject *op, Py_buffer *view)
{
  BlockObject *b = (BlockObject *)op;

  assert(b->exports > 0);
  if (--b->exports > 0)
    return;
  b->dead = 1;
  if (b->alloc->views != NULL) {
    /* May run while an exception is pending: keep it. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *pending = PyErr_GetRaisedException();
    if (PyDict_DelItem(b->alloc->views, b->key) < 0)
      PyErr_WriteUnraisable(op);
    PyErr_SetRaisedException(pending);
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyDict_DelItem(b->alloc->views, b->key) < 0)
      PyErr_WriteUnraisable(op);
    PyErr_Restore(type, value, tb);
#endif
    /* The allocator's with block ended while views were alive: this was
     * the last one. */
    if (b->alloc->closing && PyDict_GET_SIZE(b->alloc->views) == 0)
      (void)allocator_destroy(b->alloc);
  }
}

static int
Block_traverse(PyObject *op, visitproc visit, void *arg)
{
  BlockObject *b = (BlockObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(b->alloc);
  Py_VISIT(b->key);
  return 0;
}

static void
Block_dealloc(PyObject *op)
{
  BlockObject *b = (BlockObject *)op;
  PyTypeObject *tp = Py_TYPE(op);

  assert(b->exports == 0);
  PyObject_GC_UnTrack(op);
  Py_CLEAR(b->alloc);
  Py_CLEAR(b->key);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static PyObject *
Block_repr(PyObject *op)
{
  BlockObject *b = (BlockObject *)op;
  char at[ADDR_TEXT_LEN];
  return PyUnicode_FromFormat("<scralloc block %s, %zd bytes, %zd export%s%s>",
                              addr_text(at, b->addr), b->len, b->exports,
                              b->exports == 1 ? "" : "s", b->dead ? ", expired" : "");
}

static PyMemberDef Block_members[] = {
  {"exports", T_PYSSIZET, offsetof(BlockObject, exports), READONLY, "live buffer exports"},
  {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Block_slots[] = {
  {Py_bf_getbuffer, Block_getbuffer},
  {Py_bf_releasebuffer, Block_releasebuffer},
  {Py_tp_traverse, Block_traverse},
  {Py_tp_dealloc, Block_dealloc},
  {Py_tp_repr, Block_repr},
  {Py_tp_members, Block_members},
  {Py_tp_doc, (void *)"The exporter behind Allocator.view(): one block, counted exports."},
  {0, NULL},
};

static PyType_Spec Block_spec = {
  .name = "scralloc._scralloc.Block",
  .basicsize = sizeof(BlockObject),
  .flags = SCR_PY_HELPER_TYPE_FLAGS,
  .slots = Block_slots,
};

/* ---- Allocator ----------------------------------------------------- */

static void
allocator_link(module_state *st, AllocatorObject *a)
{
  a->next = st->open;
  if (a->next != NULL)
    a->next->pprev = &a->next;
  st->open = a;
  a->pprev = &st->open;
}

static void
allocator_unlink(AllocatorObject *a)
{
  if (a->pprev == NULL)
    return;
  *a->pprev = a->next;
  if (a->next != NULL)
    a->next->pprev = a->pprev;
  a->next = NULL;
  a->pprev = NULL;
}

/* The heap of an open allocator, or NULL with ValueError.  An allocator
 * whose with block ended while views were alive is closed already for
 * every call; only its views still reach its memory. */
static scr_heap *
open_heap(AllocatorObject *a)
{
  if (!a->initialized)
    PyErr_SetString(PyExc_ValueError, "Allocator.__init__() was not called");
  else if (a->heap == NULL || a->closing)
    PyErr_SetString(PyExc_ValueError, "operation on a closed allocator");
  else
    return a->heap;
  return NULL;
}

/* A bare Allocator: it has a heap once __init__ (or from_env) opens one,
 * as a socket has a descriptor once __init__ made it. */
static PyObject *
Allocator_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
  AllocatorObject *a = (AllocatorObject *)type->tp_alloc(type, 0);

  if (a == NULL)
    return NULL;
  a->views = PyDict_New();
  if (a->views == NULL) {
    Py_DECREF(a);
    return NULL;
  }
  a->rec = _scr_py_record_new();
  if (a->rec == NULL) {
    Py_DECREF(a);
    return PyErr_NoMemory();
  }
  return (PyObject *)a;
}

/* Open the heap, once in an allocator's life: a second __init__ would
 * drop the first heap's blocks (and their views) without a word. */
static int
allocator_open(AllocatorObject *a, const scr_options *opt)
{
  module_state *st = type_state(Py_TYPE(a));
  scr_heap *h;

  if (a->initialized) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Allocator.__init__() called on an allocator already initialized; "
                    "make a new Allocator");
    return -1;
  }
  errno = 0;
  h = scr_heap_new(opt);
  if (h == NULL) {
    raise_scr(st, SCR_ENOMEM, "Allocator", 0);
    return -1;
  }
  a->heap = h;
  a->initialized = 1;
  _scr_py_record_open(a->rec, h);
  allocator_link(st, a);
  return 0;
}

static PyObject *
allocator_create(PyTypeObject *type, const scr_options *opt)
{
  PyObject *a = Allocator_new(type, NULL, NULL);

  if (a != NULL && allocator_open((AllocatorObject *)a, opt) < 0)
    Py_CLEAR(a);
  return a;
}

static int
Allocator_init(PyObject *op, PyObject *args, PyObject *kwds)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_options opt;

  if (a->initialized)
    return allocator_open(a, NULL);  /* the RuntimeError, before any parsing */
  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "Allocator() takes only keyword arguments");
    return -1;
  }
  scr_options_init(&opt);
  if (options_from_kwargs(kwds, &opt) < 0)
    return -1;
  return allocator_open(a, &opt);
}

static PyObject *
Allocator_from_env(PyObject *cls, PyObject *args, PyObject *kwds)
{
  scr_options opt;

  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "Allocator.from_env() takes only keyword arguments");
    return NULL;
  }
  scr_options_init(&opt);
  report_raises = 1;  /* a bad SCRALLOC_* value warns; an error under -W error */
  scr_options_from_env(&opt);
  report_raises = 0;
  if (PyErr_Occurred() || options_from_kwargs(kwds, &opt) < 0)
    return NULL;
  return allocator_create((PyTypeObject *)cls, &opt);
}

/* Give every byte back (no view may be alive), or, while blocks of
 * Python's objects live on the heap, leave that to the free of the last
 * one (the allocator is closed for every call at once, and stays linked
 * for memory_usage() until it goes).  Returns how many blocks keep it. */
static long long
allocator_destroy(AllocatorObject *a)
{
  long long kept = 0;

  if (a->heap != NULL)
    kept = _scr_py_close(a->rec);
  if (kept == 0)
    allocator_unlink(a);
  a->heap = NULL;
  a->closing = 0;
  return kept;
}

/* allocator_destroy, saying with a ScrallocWarning when Python's blocks
 * keep the heap; 0, or -1 when the warning became an error. */
static int
allocator_finish(AllocatorObject *a)
{
  long long kept = allocator_destroy(a);
  PyObject *mod, *category;
  int r;

  if (kept == 0)
    return 0;
  mod = PyType_GetModule(Py_TYPE(a));
  category = mod != NULL ? PyObject_GetAttrString(mod, "ScrallocWarning") : NULL;
  if (category == NULL)
    return -1;
  r = PyErr_WarnFormat(category, 1,
                       "allocator closed while %lld block(s) of Python's objects made under "
                       "serve_python() live on its heap: the heap goes back to the OS when "
                       "Python frees the last of them (stats()['python'])",
                       kept);
  Py_DECREF(category);
  return r;
}

/* Close: refused while a view is exported (like mmap.close()) or while a
 * serve_python() block of the heap is open; nothing to do once closed, or
 * closing (the last view's release closes it). */
static int
allocator_close(AllocatorObject *a)
{
  if (a->heap == NULL || a->closing)
    return 0;
  if (a->views != NULL && PyDict_GET_SIZE(a->views) > 0) {
    PyErr_Format(PyExc_BufferError,
                 "cannot close allocator: %zd block(s) still exported as memoryviews",
                 PyDict_GET_SIZE(a->views));
    return -1;
  }
  if (_scr_py_close_check(a->rec) < 0)
    return -1;
  return allocator_finish(a);
}

static int
Allocator_traverse(PyObject *op, visitproc visit, void *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(a->views);
  return 0;
}

static int
Allocator_clear(PyObject *op)
{
  AllocatorObject *a = (AllocatorObject *)op;
  Py_CLEAR(a->views);
  return 0;
}

/* An allocator dropped open warns, as unclosed files and sockets do;
 * tp_dealloc gives its memory back all the same. */
static void
Allocator_finalize(PyObject *op)
{
  AllocatorObject *a = (AllocatorObject *)op;
  PyObject *pending;

  if (a->heap == NULL || a->closing)
    return;
  pending = exc_take();
  if (PyErr_ResourceWarning(op, 1, "unclosed allocator %R", op) < 0)
    PyErr_WriteUnraisable(op);
  exc_put(pending);
}

static void
Allocator_dealloc(PyObject *op)
{
  AllocatorObject *a = (AllocatorObject *)op;
  PyTypeObject *tp = Py_TYPE(op);

  if (PyObject_CallFinalizerFromDealloc(op) < 0)
    return;  /* resurrected by a warning filter that kept it */
  PyObject_GC_UnTrack(op);
  if (a->weakreflist != NULL)
    PyObject_ClearWeakRefs(op);
  /* No Block can be exported here: each holds a reference to us. */
  Py_CLEAR(a->views);
  allocator_unlink(a);
  if (a->heap != NULL) {
    scr_heap_destroy(a->heap);
    a->heap = NULL;
  }
  _scr_py_record_free(a->rec);
  a->rec = NULL;
  tp->tp_free(op);
  Py_DECREF(tp);
}

/* The Block exporting addr, or NULL (no exception) when none does. */
static BlockObject *
exported_block(AllocatorObject *a, PyObject *key)
{
  PyObject *b;

  if (a->views == NULL)
    return NULL;
  b = PyDict_GetItemWithError(a->views, key);
  return (BlockObject *)b;
}

/* -1 with BufferError if the block at addr has live views. */
static int
refuse_if_exported(AllocatorObject *a, const char *op, uintptr_t addr)
{
  PyObject *key;
  BlockObject *b;
  char at[ADDR_TEXT_LEN];

  if (a->views == NULL || PyDict_GET_SIZE(a->views) == 0)
    return 0;
  key = PyLong_FromUnsignedLongLong((unsigned long long)addr);
  if (key == NULL)
    return -1;
  b = exported_block(a, key);
  Py_DECREF(key);
  if (b == NULL)
    return PyErr_Occurred() ? -1 : 0;
  PyErr_Format(PyExc_BufferError, "cannot %s block %s: %zd memoryview export(s) exist", op,
               addr_text(at, addr), b->exports);
  return -1;
}

static PyObject *
Allocator_malloc(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = open_heap(a);
  size_t n;
  void *p;

  if (h == NULL || get_size(arg, "malloc", "size", &n) < 0)
    return NULL;
  errno = 0;
  p = _scr_py_malloc(a->rec, n);
  if (p == NULL)
    return raise_errno(type_state(Py_TYPE(op)), errno, "malloc");
  return addr_result(p);
}

static PyObject *
Allocator_calloc(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = open_heap(a);
  size_t count, size;
  void *p;

  if (h == NULL || check_nargs("calloc", nargs, 2) < 0 ||
      get_size(args[0], "calloc", "count", &count) < 0 ||
      get_size(args[1], "calloc", "size", &size) < 0)
    return NULL;
  if (size != 0 && count > (size_t)PY_SSIZE_T_MAX / size) {
    PyErr_SetString(PyExc_OverflowError, "calloc: count * size is too large");
    return NULL;
  }
  errno = 0;
  p = _scr_py_calloc(a->rec, count, size);
  if (p == NULL)
    return raise_errno(type_state(Py_TYPE(op)), errno, "calloc");
  return addr_result(p);
}

static PyObject *
Allocator_aligned_alloc(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = open_heap(a);
  size_t alignment, size;
  void *p;

  if (h == NULL || check_nargs("aligned_alloc", nargs, 2) < 0 ||
      get_size(args[0], "aligned_alloc", "alignment", &alignment) < 0 ||
      get_size(args[1], "aligned_alloc", "size", &size) < 0)
    return NULL;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    PyErr_Format(PyExc_ValueError, "aligned_alloc: alignment must be a power of two, not %zu",
                 alignment);
    return NULL;
  }
  errno = 0;
  p = _scr_py_aligned_alloc(a->rec, alignment, size);
  if (p == NULL)
    return raise_errno(type_state(Py_TYPE(op)), errno, "aligned_alloc");
  if (((uintptr_t)p & (alignment - 1)) != 0) {
    /* The core broke its contract: do not hand out a misaligned block. */
    (void)_scr_py_free_checked(a->rec, p);
    PyErr_Format(PyExc_SystemError, "aligned_alloc: scralloc returned %p, not %zu-aligned", p,
                 alignment);
    return NULL;
  }
  return addr_result(p);
}

static PyObject *
Allocator_realloc(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  scr_heap *h = open_heap(a);
  uintptr_t addr;
  size_t n;
  void *out = NULL;
  int err;

  if (h == NULL || check_nargs("realloc", nargs, 2) < 0 ||
      get_addr(st, args[0], "realloc", &addr) < 0 ||
      get_size(args[1], "realloc", "size", &n) < 0)
    return NULL;
  if (addr != 0 && refuse_if_exported(a, "realloc", addr) < 0)
    return NULL;
  err = _scr_py_realloc_checked(a->rec, (void *)addr, n, &out);
  if (err != SCR_OK)
    return raise_scr(st, err, "realloc", addr);
  return addr_result(out);
}

static PyObject *
Allocator_free(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  scr_heap *h = open_heap(a);
  uintptr_t addr;
  int err;

  if (h == NULL || get_addr(st, arg, "free", &addr) < 0)
    return NULL;
  if (addr == 0)
    Py_RETURN_NONE;
  if (refuse_if_exported(a, "free", addr) < 0)
    return NULL;
  err = _scr_py_free_checked(a->rec, (void *)addr);
  if (err != SCR_OK)
    return raise_scr(st, err, "free", addr);
  Py_RETURN_NONE;
}

static PyObject *
Allocator_usable_size(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  scr_heap *h = open_heap(a);
  uintptr_t addr;
  size_t n = 0;
  int err;

  if (h == NULL || get_addr(st, arg, "usable_size", &addr) < 0)
    return NULL;
  if (addr == 0)
    return PyLong_FromLong(0);
  err = _scr_py_refuse_python(a->rec, (const void *)addr);
  if (err == SCR_OK) {
    _scr_py_lock(a->rec);
    err = scr_heap_usable_size_checked(h, (const void *)addr, &n);
    _scr_py_unlock(a->rec);
  }
  if (err != SCR_OK)
    return raise_scr(st, err, "usable_size", addr);
  return PyLong_FromSize_t(n);
}

static PyObject *
Allocator_check(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  scr_heap *h = open_heap(a);
  uintptr_t addr;
  int err;

  if (h == NULL || get_addr(st, arg, "check", &addr) < 0)
    return NULL;
  if (addr == 0)
    return raise_scr(st, SCR_EFOREIGN, "check", 0);
  _scr_py_lock(a->rec);
  err = scr_heap_check(h, (const void *)addr);
  _scr_py_unlock(a->rec);
  if (err != SCR_OK)
    return raise_scr(st, err, "check", addr);
  Py_RETURN_NONE;
}

/* The kind of block at the address arg (see _scr_py_block_kind): 0 for
 * what is no address of a live block; -1 with an exception. */
static int
block_kind_of(PyObject *op, PyObject *arg, const char *name)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  uintptr_t addr;

  if (open_heap(a) == NULL)
    return -1;
  if (get_addr(st, arg, name, &addr) < 0) {
    if (!PyErr_ExceptionMatches(st->InvalidPointerError))
      return -1;
    PyErr_Clear();
    return 0;
  }
  return _scr_py_block_kind(a->rec, (const void *)addr);
}

static PyObject *
Allocator_owns(PyObject *op, PyObject *arg)
{
  int kind = block_kind_of(op, arg, "owns");
  return kind < 0 ? NULL : PyBool_FromLong(kind != 0);
}

static PyObject *
Allocator_block_kind(PyObject *op, PyObject *arg)
{
  switch (block_kind_of(op, arg, "block_kind")) {
  case -1: return NULL;
  case 1: return PyUnicode_FromString("allocator");
  case 2: return PyUnicode_FromString("python");
  default: Py_RETURN_NONE;
  }
}

static PyObject *
Allocator_view(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  module_state *st = type_state(Py_TYPE(op));
  scr_heap *h = open_heap(a);
  uintptr_t addr;
  size_t n = 0;
  int err;
  PyObject *key, *mv;
  BlockObject *b;

  if (h == NULL || get_addr(st, arg, "view", &addr) < 0)
    return NULL;
  if (addr == 0)
    return raise_scr(st, SCR_EFOREIGN, "view", 0);
  key = PyLong_FromUnsignedLongLong((unsigned long long)addr);
  if (key == NULL)
    return NULL;
  b = exported_block(a, key);
  if (b != NULL) {
    Py_DECREF(key);
    return PyMemoryView_FromObject((PyObject *)b);
  }
  if (PyErr_Occurred()) {
    Py_DECREF(key);
    return NULL;
  }
  err = _scr_py_refuse_python(a->rec, (const void *)addr);
  if (err == SCR_OK) {
    _scr_py_lock(a->rec);
    err = scr_heap_usable_size_checked(h, (const void *)addr, &n);
    _scr_py_unlock(a->rec);
  }
  if (err != SCR_OK) {
    Py_DECREF(key);
    return raise_scr(st, err, "view", addr);
  }
  if (n > (size_t)PY_SSIZE_T_MAX) {
    Py_DECREF(key);
    PyErr_SetString(PyExc_OverflowError, "view: block too large");
    return NULL;
  }
  b = PyObject_GC_New(BlockObject, st->Block_type);
  if (b == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  Py_INCREF(a);
  b->alloc = a;
  b->key = key;
  b->addr = addr;
  b->len = (Py_ssize_t)n;
  b->exports = 0;
  b->dead = 0;
  PyObject_GC_Track((PyObject *)b);
  mv = PyMemoryView_FromObject((PyObject *)b);
  Py_DECREF(b);
  return mv;
}

static PyObject *
Allocator_trim(PyObject *op, PyObject *unused)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = open_heap(a);
  size_t n;
  if (h == NULL)
    return NULL;
  _scr_py_lock(a->rec);
  n = scr_heap_trim(h);
  _scr_py_unlock(a->rec);
  return PyLong_FromSize_t(n);
}

/* Also once closed while Python's blocks keep the heap: the figures of
 * what they keep. */
static PyObject *
Allocator_stats(PyObject *op, PyObject *unused)
{
  AllocatorObject *a = (AllocatorObject *)op;
  struct scr_stats s;
  PyObject *d;

  memset(&s, 0, sizeof s);
  if (a->initialized && a->heap == NULL) {
    if (_scr_py_heap_stats(a->rec, &s) < 0) {
      PyErr_SetString(PyExc_ValueError, "operation on a closed allocator");
      return NULL;
    }
  } else {
    if (open_heap(a) == NULL)
      return NULL;
    _scr_py_heap_stats(a->rec, &s);
  }
  d = stats_to_dict(&s);
  if (d != NULL && _scr_py_stats_add(a->rec, d) < 0)
    Py_CLEAR(d);
  return d;
}

static PyObject *
Allocator_stats_json(PyObject *op, PyObject *unused)
{
  scr_heap *h = open_heap((AllocatorObject *)op);
  char small[4096], *buf = small;
  size_t need;
  PyObject *r;

  if (h == NULL)
    return NULL;
  _scr_py_lock(((AllocatorObject *)op)->rec);
  need = scr_heap_stats_json(h, small, sizeof small);
  _scr_py_unlock(((AllocatorObject *)op)->rec);
  if (need >= sizeof small) {
    buf = PyMem_Malloc(need + 1);
    if (buf == NULL)
      return PyErr_NoMemory();
    _scr_py_lock(((AllocatorObject *)op)->rec);
    need = scr_heap_stats_json(h, buf, need + 1);
    _scr_py_unlock(((AllocatorObject *)op)->rec);
  }
  r = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)need);
  if (buf != small)
    PyMem_Free(buf);
  return r;
}

static PyObject *
Allocator_validate(PyObject *op, PyObject *unused)
{
  scr_heap *h = open_heap((AllocatorObject *)op);
  int err;
  if (h == NULL)
    return NULL;
  _scr_py_lock(((AllocatorObject *)op)->rec);
  err = scr_heap_validate(h);
  _scr_py_unlock(((AllocatorObject *)op)->rec);
  if (err != SCR_OK) {
    PyErr_SetString(PyExc_RuntimeError,
                    "scralloc heap validation failed (the details came as ScrallocWarning)");
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *
Allocator_close(PyObject *op, PyObject *unused)
{
  if (allocator_close((AllocatorObject *)op) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static PyObject *
Allocator_enter(PyObject *op, PyObject *unused)
{
  if (open_heap((AllocatorObject *)op) == NULL)
    return NULL;
  return Py_NewRef(op);
}

/* Leaving a with block closes the allocator.  With views still alive
 * (a view kept past the block, or held by the traceback of the block's
 * exception) it is closed for every call at once and its memory goes back
 * when the last view is released: no BufferError that would hide the
 * block's own exception, and no heap left open. */
static PyObject *
Allocator_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
  AllocatorObject *a = (AllocatorObject *)op;

  if (check_nargs("__exit__", nargs, 3) < 0)
    return NULL;
  if (a->heap == NULL || a->closing)
    Py_RETURN_FALSE;
  if (_scr_py_close_check(a->rec) < 0)
    return NULL;  /* inside its own serve_python() block */
  if (a->views != NULL && PyDict_GET_SIZE(a->views) > 0) {
    a->closing = 1;
    Py_RETURN_FALSE;
  }
  if (allocator_finish(a) < 0)
    return NULL;
  Py_RETURN_FALSE;
}

/* The live-figure getters (allocs, mmaps, bytes) and their seed-style
 * aliases; the closure is the byte offset of the field in struct scr_stats. */
static PyObject *
Allocator_get_stat(PyObject *op, void *closure)
{
  scr_heap *h = open_heap((AllocatorObject *)op);
  struct scr_stats s;
  uint64_t v;

  if (h == NULL)
    return NULL;
  memset(&s, 0, sizeof s);
  _scr_py_heap_stats(((AllocatorObject *)op)->rec, &s);
  memcpy(&v, (const char *)&s + (size_t)(uintptr_t)closure, sizeof v);
  return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

static PyObject *
Allocator_get_closed(PyObject *op, void *closure)
{
  AllocatorObject *a = (AllocatorObject *)op;
  return PyBool_FromLong(a->heap == NULL || a->closing);
}

static PyObject *
Allocator_get_options(PyObject *op, void *closure)
{
  scr_heap *h = open_heap((AllocatorObject *)op);
  scr_options opt;

  if (h == NULL)
    return NULL;
  scr_heap_options(h, &opt);
  return options_to_dict(&opt);
}

static PyObject *
Allocator_get_exports(PyObject *op, void *closure)
{
  AllocatorObject *a = (AllocatorObject *)op;
  Py_ssize_t n = 0, pos = 0;
  PyObject *k, *v;

  if (a->views != NULL)
    while (PyDict_Next(a->views, &pos, &k, &v))
      n += ((BlockObject *)v)->exports;
  return PyLong_FromSsize_t(n);
}

static PyObject *
Allocator_repr(PyObject *op)
{
  AllocatorObject *a = (AllocatorObject *)op;
  struct scr_stats s;
  scr_options opt;

  if (a->heap == NULL || a->closing)
    return PyUnicode_FromFormat("<scralloc.Allocator closed at %p>", (void *)a);
  memset(&s, 0, sizeof s);
  _scr_py_heap_stats(a->rec, &s);
  scr_heap_options(a->heap, &opt);
  return PyUnicode_FromFormat(
      "<scralloc.Allocator retain=%u allocs=%llu mmaps=%llu bytes=%llu heap_used=%llu "
      "heap_total=%llu>",
      (unsigned)opt.retain, (unsigned long long)s.allocs, (unsigned long long)s.mmaps,
      (unsigned long long)s.bytes, (unsigned long long)s.heap_used,
      (unsigned long long)s.heap_total);
}

/* ---- sampled allocation sites (docs/profile.md) -------------------- */

/* The Python frames of a sampled allocation, for the core's profile
 * (scr_profile_set_lang_hook): innermost first, "function\tfile\tline" a
 * line.  Only on a thread that holds the GIL; the frame objects it may
 * make go to Python's allocators of before serve_python (_scr_py_hook_begin).
 * The collector is kept off meanwhile: since 3.11 PyThreadState_GetFrame
 * and PyFrame_GetBack may make frame objects, and a collection started by
 * that allocation would run arbitrary code inside an allocator call. */
#define PROFILE_PY_DEPTH 64

static size_t
put_text(char *buf, size_t len, size_t n, PyObject *s)
{
  Py_ssize_t sz = 0;
  const char *t = NULL;
  size_t i;
  if (s != NULL && PyUnicode_Check(s)) {
    if (PyUnicode_IS_COMPACT_ASCII(s)) {
      t = (const char *)PyUnicode_DATA(s);
      sz = PyUnicode_GET_LENGTH(s);
    } else {
      t = PyUnicode_AsUTF8AndSize(s, &sz);
      if (t == NULL)
        PyErr_Clear();
    }
  }
  if (t == NULL) {
    t = "?";
    sz = 1;
  }
  for (i = 0; i < (size_t)sz && n < len; i++)  /* tabs and newlines would split the line */
    buf[n++] = t[i] == '\t' || t[i] == '\n' ? ' ' : t[i];
  return n;
}

/* This thread holds the GIL and has a thread state to walk.  Before 3.12
 * PyGILState_Check answers 1 for any thread once a subinterpreter was
 * made, and the current thread state is the process's, not the thread's:
 * both are checked against the thread's own (PyGILState_GetThisThreadState;
 * a subinterpreter's thread gets no frames). */
static int
hook_holds_gil(void)
{
#if PY_VERSION_HEX >= 0x030C0000
  return thread_holds_gil();
#else
  PyThreadState *ts = _PyThreadState_UncheckedGet();
  return ts != NULL && PyGILState_Check() && ts == PyGILState_GetThisThreadState();
#endif
}

/* A runner's frames (python -m scralloc run: run_program's and the
 * runpy frames just below it) are no part of the program's stacks: the
 * walk stops at frames_root's code and drops the frames of
 * frames_trim_file above it.  Strong references; set under the GIL. */
static PyObject *frames_root, *frames_trim_file;

static int
same_file(PyObject *a, PyObject *b)
{
  return a == b || (a != NULL && b != NULL && PyUnicode_Check(a) && PyUnicode_Check(b) &&
                    PyUnicode_Compare(a, b) == 0);
}

static size_t
python_frames(char *buf, size_t len, void *arg)
{
  PyFrameObject *f;
  PyObject *pending;
  size_t n = 0, starts[PROFILE_PY_DEPTH];
  unsigned char trimmable[PROFILE_PY_DEPTH];
  int depth = 0, gc_was;

  if (len == 0 || !hook_holds_gil() || interpreter_finalizing())
    return 0;
  _scr_py_hook_begin();
  gc_was = PyGC_Disable();
  pending = exc_take();
  f = PyThreadState_GetFrame(PyThreadState_Get());
  while (f != NULL && depth < PROFILE_PY_DEPTH) {
    PyCodeObject *co = PyFrame_GetCode(f);
    PyFrameObject *back;
    char num[24];
    size_t start = n, k, numlen;
    int line = PyFrame_GetLineNumber(f);

    if (frames_root != NULL && (PyObject *)co == frames_root) {
      Py_DECREF(co);
      while (depth > 0 && trimmable[depth - 1])
        n = starts[--depth];
      break;
    }
    starts[depth] = n;
    trimmable[depth] = frames_trim_file != NULL && same_file(co->co_filename, frames_trim_file);
    if (depth > 0 && n < len)
      buf[n++] = '\n';
#if PY_VERSION_HEX >= 0x030B0000
    n = put_text(buf, len, n, co->co_qualname);
#else
    n = put_text(buf, len, n, co->co_name);
#endif
    if (n < len)
      buf[n++] = '\t';
    n = put_text(buf, len, n, co->co_filename);
    numlen = (size_t)PyOS_snprintf(num, sizeof num, "\t%d", line);
    for (k = 0; k < numlen && n < len; k++)
      buf[n++] = num[k];
    Py_DECREF(co);
    if (n >= len) {             /* no room for the whole line: drop it (and its newline) */
      n = start;
      break;
    }
    back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
    depth++;
  }
  Py_XDECREF(f);
  exc_put(pending);
  if (gc_was)
    PyGC_Enable();
  _scr_py_hook_end();
  return n;
}

/* The kind of a sampled block of this module's heaps, and the Allocator
 * it belongs to (borrowed; NULL: the process allocator's, or a heap no
 * Allocator of this interpreter has). */
static const char *
sample_owner(module_state *st, const scr_profile_sample *s, AllocatorObject **owner)
{
  AllocatorObject *a;
  *owner = NULL;
  if (s->heap == NULL)
    return "process";
  for (a = st->open; a != NULL; a = a->next)
    if (_scr_py_record_heap(a->rec) == s->heap) {
      int kind = _scr_py_block_kind(a->rec, s->block);
      *owner = a;
      return kind == 1 ? "allocator" : kind == 2 ? "python" : "heap";
    }
  return "heap";
}

/* One sample as the tuple scralloc.sites reads: (address, size, rate,
 * bytes, blocks, pinned, site, allocator, kind, native return addresses
 * innermost first, language frames text or None). */
static PyObject *
sample_tuple(const scr_profile_sample *s, PyObject *owner, const char *kind)
{
  PyObject *pcs = PyTuple_New((Py_ssize_t)s->depth), *t;
  unsigned i;
  if (pcs == NULL)
    return NULL;
  for (i = 0; i < s->depth; i++) {
    PyObject *pc = PyLong_FromVoidPtr((void *)s->frames[i]);
    if (pc == NULL) {
      Py_DECREF(pcs);
      return NULL;
    }
    PyTuple_SET_ITEM(pcs, (Py_ssize_t)i, pc);
  }
  t = Py_BuildValue("(KnndddKOsNz)", (unsigned long long)(uintptr_t)s->block, (Py_ssize_t)s->size,
                    (Py_ssize_t)s->rate, s->bytes, s->blocks, s->pinned,
                    (unsigned long long)s->site, owner != NULL ? owner : Py_None, kind, pcs,
                    s->lang);
  return t;
}

typedef struct {
  module_state *st;
  PyObject *list;
  int failed;
  PyObject *owner;              /* the Allocator of a peak snapshot */
} sample_ctx;

static int
collect_sample(const scr_profile_sample *s, void *arg)
{
  sample_ctx *c = arg;
  AllocatorObject *owner;
  const char *kind = sample_owner(c->st, s, &owner);
  PyObject *t = sample_tuple(s, (PyObject *)owner, kind);
  if (t == NULL || PyList_Append(c->list, t) < 0) {
    Py_XDECREF(t);
    c->failed = 1;
    return 1;
  }
  Py_DECREF(t);
  return 0;
}

static int
collect_peak_sample(const scr_profile_sample *s, int kind, void *arg)
{
  sample_ctx *c = arg;
  PyObject *t = sample_tuple(s, c->owner, kind == 1 ? "allocator" : "python");
  if (t == NULL || PyList_Append(c->list, t) < 0) {
    Py_XDECREF(t);
    return 1;
  }
  Py_DECREF(t);
  return 0;
}

/* The live samples of h (NULL: every heap and the process allocator) as
 * a list of sample tuples. */
static PyObject *
collect_samples(module_state *st, const scr_heap *h)
{
  sample_ctx c = {st, PyList_New(0), 0, NULL};
  if (c.list == NULL)
    return NULL;
  scr_profile_samples(h, collect_sample, &c);
  if (c.failed)
    Py_CLEAR(c.list);
  return c.list;
}

/* scralloc.sites.records(raw, native): the Sample records. */
static PyObject *
make_records(PyObject *raw, PyObject *native, PyObject *peak_used)
{
  PyObject *mod, *r;
  if (raw == NULL)
    return NULL;
  mod = PyImport_ImportModule("scralloc.sites");
  if (mod == NULL) {
    Py_DECREF(raw);
    return NULL;
  }
  r = PyObject_CallMethod(mod, "_records", "NOO", raw, native, peak_used);
  Py_DECREF(mod);
  return r;
}

static PyObject *Allocator_profile_routed(PyObject *op, PyObject *args, PyObject *kwds);

/* The records are made off the served heaps, so profiling inside a
 * serve_python() block neither grows the heap nor samples itself. */
static PyObject *
Allocator_profile(PyObject *op, PyObject *args, PyObject *kwds)
{
  PyObject *r;
  _scr_py_pause_routing(1);
  r = Allocator_profile_routed(op, args, kwds);
  _scr_py_pause_routing(0);
  return r;
}

static PyObject *
Allocator_profile_routed(PyObject *op, PyObject *args, PyObject *kwds)
{
  static char *kwlist[] = {"native", "peak", NULL};
  AllocatorObject *a = (AllocatorObject *)op;
  int native = 1, peak = 0;
  scr_heap *h;

  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$pp:profile", kwlist, &native, &peak))
    return NULL;
  /* A closed Allocator's heap that Python's blocks keep still shows. */
  h = a->initialized ? _scr_py_record_heap(a->rec) : NULL;
  if (h == NULL)
    return open_heap(a) == NULL ? NULL : PyList_New(0);
  if (peak) {
    sample_ctx c = {NULL, PyList_New(0), 0, op};
    uint64_t used = 0;
    PyObject *u, *r;
    if (c.list == NULL)
      return NULL;
    if (_scr_py_peak_samples(a->rec, collect_peak_sample, &c, &used) < 0) {
      Py_DECREF(c.list);
      return NULL;
    }
    u = PyLong_FromUnsignedLongLong((unsigned long long)used);
    if (u == NULL) {
      Py_DECREF(c.list);
      return NULL;
    }
    r = make_records(c.list, native ? Py_True : Py_False, u);
    Py_DECREF(u);
    return r;
  }
  return make_records(collect_samples(type_state(Py_TYPE(op)), h), native ? Py_True : Py_False,
                      Py_None);
}

static PyObject *
Allocator_watch_peak(PyObject *op, PyObject *arg)
{
  AllocatorObject *a = (AllocatorObject *)op;
  size_t from = 0;
  if (open_heap(a) == NULL)
    return NULL;
  if (arg != Py_None && get_size(arg, "watch_peak", "from_bytes", &from) < 0)
    return NULL;
  _scr_py_watch_peak(a->rec, from);
  Py_RETURN_NONE;
}

/* "folded", "pprof", "blame", "top" -> SCR_PROFILE_*; -1 with ValueError. */
static int
profile_format(PyObject *name, int native)
{
  static const struct {
    const char *name;
    int code;
  } formats[] = {{"folded", SCR_PROFILE_FOLDED},
                 {"pprof", SCR_PROFILE_PPROF},
                 {"blame", SCR_PROFILE_BLAME},
                 {"top", SCR_PROFILE_TOP}};
  const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  size_t i;
  if (s != NULL)
    for (i = 0; i < sizeof formats / sizeof formats[0]; i++)
      if (strcmp(s, formats[i].name) == 0)
        return formats[i].code | (native ? SCR_PROFILE_NATIVE : 0);
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_ValueError, "format %R: one of 'folded', 'pprof', 'blame', 'top'", name);
  return -1;
}

/* scr_profile_write(h, path, format); None, or OSError/ValueError. */
static PyObject *
write_profile(const scr_heap *h, PyObject *args, PyObject *kwds, const char *fname)
{
  static char *kwlist[] = {"path", "format", "native", NULL};
  PyObject *path = NULL, *fmt = NULL, *bytes = NULL;
  int native = 0, code, err, saved;
  char spec[48];

  PyOS_snprintf(spec, sizeof spec, "O|O$p:%s", fname);
  if (!PyArg_ParseTupleAndKeywords(args, kwds, spec, kwlist, &path, &fmt, &native))
    return NULL;
  if (fmt == NULL)
    fmt = PyUnicode_FromString("folded");
  else
    Py_INCREF(fmt);
  if (fmt == NULL)
    return NULL;
  code = profile_format(fmt, native);
  Py_DECREF(fmt);
  if (code < 0 || !PyUnicode_FSConverter(path, &bytes))
    return NULL;
  errno = 0;
  err = scr_profile_write(h, PyBytes_AS_STRING(bytes), (unsigned)code);
  saved = errno;
  if (err == -1) {
    errno = saved ? saved : EIO;
    PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    Py_DECREF(bytes);
    return NULL;
  }
  Py_DECREF(bytes);
  if (err != SCR_OK) {
    PyErr_Format(PyExc_ValueError, "%s: %s", fname, scr_strerror(err));
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *
Allocator_write_profile(PyObject *op, PyObject *args, PyObject *kwds)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = a->initialized ? _scr_py_record_heap(a->rec) : NULL;
  if (h == NULL && open_heap(a) == NULL)
    return NULL;
  if (h == NULL) {
    PyErr_SetString(PyExc_ValueError, "operation on a closed allocator");
    return NULL;
  }
  return write_profile(h, args, kwds, "write_profile");
}

static PyObject *
Allocator_get_profile_rate(PyObject *op, void *closure)
{
  scr_heap *h = open_heap((AllocatorObject *)op);
  scr_options opt;
  if (h == NULL)
    return NULL;
  scr_heap_options(h, &opt);
  return PyLong_FromSize_t(opt.profile_rate);
}

static int
Allocator_set_profile_rate(PyObject *op, PyObject *value, void *closure)
{
  AllocatorObject *a = (AllocatorObject *)op;
  scr_heap *h = open_heap(a);
  size_t rate;
  if (h == NULL)
    return -1;
  if (value == NULL) {
    PyErr_SetString(PyExc_AttributeError, "cannot delete profile_rate (set 0 to stop sampling)");
    return -1;
  }
  if (get_size(value, "profile_rate", "rate", &rate) < 0)
    return -1;
  _scr_py_lock(a->rec);
  scr_heap_profile_rate(h, rate);
  _scr_py_unlock(a->rec);
  return 0;
}

static PyObject *
mod_profile(PyObject *module, PyObject *native)
{
  PyObject *r;
  _scr_py_pause_routing(1);
  r = make_records(collect_samples(get_state(module), NULL), native, Py_None);
  _scr_py_pause_routing(0);
  return r;
}

static PyObject *
mod_profile_symbol(PyObject *module, PyObject *arg)
{
  void *pc = PyLong_AsVoidPtr(arg);
  char small[256], *buf = small;
  size_t need;
  PyObject *r;
  if (pc == NULL && PyErr_Occurred())
    return NULL;
  need = scr_profile_symbol(pc, small, sizeof small);
  if (need >= sizeof small) {
    buf = PyMem_RawMalloc(need + 1);
    if (buf == NULL)
      return PyErr_NoMemory();
    scr_profile_symbol(pc, buf, need + 1);
  }
  r = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
  if (buf != small)
    PyMem_RawFree(buf);
  return r;
}

static PyObject *
mod_set_frames_root(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_set_frames_root(code, trim_file): two arguments");
    return NULL;
  }
  if ((args[0] != Py_None && !PyCode_Check(args[0])) ||
      (args[1] != Py_None && !PyUnicode_Check(args[1]))) {
    PyErr_SetString(PyExc_TypeError, "_set_frames_root(code or None, str or None)");
    return NULL;
  }
  Py_XSETREF(frames_root, args[0] == Py_None ? NULL : Py_NewRef(args[0]));
  Py_XSETREF(frames_trim_file, args[1] == Py_None ? NULL : Py_NewRef(args[1]));
  Py_RETURN_NONE;
}

/* What the frames hook writes here, for tests. */
static PyObject *
mod_python_frames(PyObject *module, PyObject *arg)
{
  char buf[4096];
  Py_ssize_t len = PyLong_AsSsize_t(arg);
  size_t n;
  if (len < 0 || len > (Py_ssize_t)sizeof buf) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_ValueError, "len: 0 to %zu", sizeof buf);
    return NULL;
  }
  n = python_frames(buf, (size_t)len, NULL);
  return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)n, "replace");
}

/* The frames hook's address, for a libscralloc.so preloaded in this
 * process (python -m scralloc run --preload --profile). */
static PyObject *
mod_lang_hook(PyObject *module, PyObject *unused)
{
  return PyLong_FromVoidPtr((void *)python_frames);
}

static PyObject *
mod_profile_write(PyObject *module, PyObject *args, PyObject *kwds)
{
  return write_profile(NULL, args, kwds, "write_profile");
}

#define STAT_CLOSURE(field) ((void *)(uintptr_t)offsetof(struct scr_stats, field))

static PyGetSetDef Allocator_getset[] = {
  {"allocs", Allocator_get_stat, NULL, "live blocks", STAT_CLOSURE(allocs)},
  {"mmaps", Allocator_get_stat, NULL, "live OS mappings", STAT_CLOSURE(mmaps)},
  {"bytes", Allocator_get_stat, NULL, "committed bytes held from the OS", STAT_CLOSURE(bytes)},
  {"Allocs", Allocator_get_stat, NULL, "alias of allocs (the seed's name)", STAT_CLOSURE(allocs)},
  {"Mmaps", Allocator_get_stat, NULL, "alias of mmaps (the seed's name)", STAT_CLOSURE(mmaps)},
  {"Bytes", Allocator_get_stat, NULL, "alias of bytes (the seed's name)", STAT_CLOSURE(bytes)},
  {"heap_total", Allocator_get_stat, NULL, "bytes held for blocks", STAT_CLOSURE(heap_total)},
  {"heap_used", Allocator_get_stat, NULL, "bytes in live blocks", STAT_CLOSURE(heap_used)},
  {"closed", Allocator_get_closed, NULL, "True once close() has run", NULL},
  {"options", Allocator_get_options, NULL, "the effective options, as a dict", NULL},
  {"exports", Allocator_get_exports, NULL, "live memoryview exports over this heap's blocks",
   NULL},
  {"peak_heap_used", _scr_py_get_peak, NULL,
   "the highest heap_used since the allocator was made or reset_peak()", NULL},
  {"python_blocks", _scr_py_get_python_blocks, NULL,
   "live blocks Python made on this heap under serve_python()", NULL},
  {"profile_rate", Allocator_get_profile_rate, Allocator_set_profile_rate,
   "mean bytes allocated between sampled blocks (0: sampling off); settable", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Allocator_methods[] = {
  {"malloc", Allocator_malloc, METH_O,
   "malloc($self, size, /)\n--\n\nAllocate size bytes; return the block's address (an int)."},
  {"calloc", (PyCFunction)(void (*)(void))Allocator_calloc, METH_FASTCALL,
   "calloc($self, count, size, /)\n--\n\nAllocate count*size zeroed bytes; return the address."},
  {"aligned_alloc", (PyCFunction)(void (*)(void))Allocator_aligned_alloc, METH_FASTCALL,
   "aligned_alloc($self, alignment, size, /)\n--\n\nAllocate size bytes aligned to alignment "
   "(a power of two); return the address."},
  {"realloc", (PyCFunction)(void (*)(void))Allocator_realloc, METH_FASTCALL,
   "realloc($self, addr, size, /)\n--\n\nResize a block; return its address.  realloc(0, n) is "
   "malloc(n), realloc(addr, 0) frees and returns 0."},
  {"free", Allocator_free, METH_O,
   "free($self, addr, /)\n--\n\nFree a block; free(0) does nothing."},
  {"usable_size", Allocator_usable_size, METH_O,
   "usable_size($self, addr, /)\n--\n\nThe usable size of a live block (0 for 0)."},
  {"check", Allocator_check, METH_O,
   "check($self, addr, /)\n--\n\nRaise InvalidPointerError unless addr is a live block."},
  {"owns", Allocator_owns, METH_O,
   "owns($self, addr, /)\n--\n\nTrue if addr is a live block of this allocator's heap, made "
   "by its methods or for Python's objects (block_kind() says which)."},
  {"block_kind", Allocator_block_kind, METH_O,
   "block_kind($self, addr, /)\n--\n\n'allocator' for a live block made by this allocator's "
   "methods, 'python' for one made for Python's objects under serve_python() (free, realloc, "
   "view and usable_size refuse it), None for anything else."},
  {"view", Allocator_view, METH_O,
   "view($self, addr, /)\n--\n\nA writable memoryview over the block's usable size.  While "
   "it is alive the block cannot be freed or resized and close() raises BufferError; "
   "leaving a with block closes the allocator once the last view is released."},
  {"trim", Allocator_trim, METH_NOARGS,
   "trim($self, /)\n--\n\nGive back every retained page and cached block; return the bytes."},
  {"stats", Allocator_stats, METH_NOARGS,
   "stats($self, /)\n--\n\nEvery core figure as a dict, with the per-class list as 'classes'."},
  {"stats_json", Allocator_stats_json, METH_NOARGS,
   "stats_json($self, /)\n--\n\nThe core's JSON rendering of stats()."},
  {"validate", Allocator_validate, METH_NOARGS,
   "validate($self, /)\n--\n\nRun the core's heap validator; RuntimeError if it fails."},
  {"close", Allocator_close, METH_NOARGS,
   "close($self, /)\n--\n\nGive every byte back to the OS; BufferError while views exist.  "
   "Closing twice does nothing."},
  {"from_env", (PyCFunction)(void (*)(void))Allocator_from_env,
   METH_CLASS | METH_VARARGS | METH_KEYWORDS,
   "from_env($type, /, **options)\n--\n\nAn Allocator whose options come from the SCRALLOC_<NAME> "
   "environment variables, then from the keywords."},
  {"serve_python", (PyCFunction)(void (*)(void))_scr_py_serve_python,
   METH_VARARGS | METH_KEYWORDS,
   "serve_python($self, /, domains=('mem', 'obj'))\n--\n\nA context manager: inside it, "
   "Python's allocations of these domains (\"raw\", \"mem\", \"obj\") come from this "
   "allocator; its blocks are freed into it after the block ends too."},
  {"reset_peak", _scr_py_reset_peak, METH_NOARGS,
   "reset_peak($self, /)\n--\n\nStart peak_heap_used again from the current heap_used."},
  {"profile", (PyCFunction)(void (*)(void))Allocator_profile, METH_VARARGS | METH_KEYWORDS,
   "profile($self, /, *, native=True, peak=False)\n--\n\nThe live sampled blocks of this "
   "heap as scralloc.Sample records (peak=True: those of the copy watch_peak() kept at the "
   "highest heap_used); native=False leaves the native frames out."},
  {"watch_peak", Allocator_watch_peak, METH_O,
   "watch_peak($self, from_bytes, /)\n--\n\nKeep a copy of the live samples each time "
   "heap_used reaches a new high of at least from_bytes (1/8 above the last copy), for "
   "profile(peak=True); None or 0 stops."},
  {"write_profile", (PyCFunction)(void (*)(void))Allocator_write_profile,
   METH_VARARGS | METH_KEYWORDS,
   "write_profile($self, /, path, format='folded', *, native=False)\n--\n\nWrite this "
   "heap's live samples to path: 'folded' (flamegraph.pl), 'pprof' (gzipped protobuf), "
   "'blame' (folded, the bytes pinned) or 'top' (a table)."},
  {"__enter__", Allocator_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nReturn self."},
  {"__exit__", (PyCFunction)(void (*)(void))Allocator_exit, METH_FASTCALL,
   "__exit__($self, exc_type, exc, tb, /)\n--\n\nClose the allocator; return False.  With "
   "views still alive it is closed for every call at once, and its memory goes back when "
   "the last view is released (the block's own exception, if any, propagates)."},
  {NULL, NULL, 0, NULL},
};

static PyMemberDef Allocator_members[] = {
  {"__weaklistoffset__", T_PYSSIZET, offsetof(AllocatorObject, weakreflist), READONLY, NULL},
  {NULL, 0, 0, 0, NULL},
};

/* The text signature, "Allocator(*, retain=1, ...)", is made at import
 * from the option table (allocator_type_new). */
PyDoc_STRVAR(Allocator_doc,
             "Allocator(**options)\n--\n\n"
             "A scralloc heap: its own pages, counters and retention policy.\n"
             "Keywords are the core options (see scralloc.OPTIONS), e.g. retain=1.\n"
             "Dropped without close() (or a with block), it warns (ResourceWarning) and\n"
             "gives its memory back.");

static PyType_Slot Allocator_slots[] = {
  {Py_tp_new, Allocator_new},
  {Py_tp_init, Allocator_init},
  {Py_tp_finalize, Allocator_finalize},
  {Py_tp_dealloc, Allocator_dealloc},
  {Py_tp_traverse, Allocator_traverse},
  {Py_tp_clear, Allocator_clear},
  {Py_tp_repr, Allocator_repr},
  {Py_tp_methods, Allocator_methods},
  {Py_tp_getset, Allocator_getset},
  {Py_tp_members, Allocator_members},
  {Py_tp_doc, (void *)Allocator_doc},
  {0, NULL},
};

static PyType_Spec Allocator_spec = {
  .name = "scralloc.Allocator",
  .basicsize = sizeof(AllocatorObject),
  .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | SCR_PY_IMMUTABLE,
  .slots = Allocator_slots,
};

/* The Allocator type, its docstring's signature listing every option
 * with its default (the type copies the docstring). */
static PyTypeObject *
allocator_type_new(PyObject *m)
{
  PyType_Slot slots[sizeof Allocator_slots / sizeof Allocator_slots[0]];
  PyType_Spec spec = Allocator_spec;
  const char *body = strstr(Allocator_doc, "\n--\n\n");
  char doc[2048];
  size_t i, len = 0;
  int n;

  n = PyOS_snprintf(doc, sizeof doc, "Allocator(*");
  for (i = 0; n > 0 && (size_t)n < sizeof doc - len && i < OPTION_COUNT; i++) {
    len += (size_t)n;
    n = PyOS_snprintf(doc + len, sizeof doc - len, ", %s=%llu", option_table[i].name,
                      option_table[i].def);
  }
  if (n > 0 && (size_t)n < sizeof doc - len) {
    len += (size_t)n;
    n = PyOS_snprintf(doc + len, sizeof doc - len, ")%s", body != NULL ? body : "");
  }
  memcpy(slots, Allocator_slots, sizeof slots);
  if (n > 0 && (size_t)n < sizeof doc - len)  /* else the static "Allocator(**options)" */
    for (i = 0; slots[i].slot != 0; i++)
      if (slots[i].slot == Py_tp_doc)
        slots[i].pfunc = doc;
  spec.slots = slots;
  return (PyTypeObject *)PyType_FromModuleAndSpec(m, &spec, NULL);
}

scr_py_record *
_scr_py_record_of(PyObject *self)
{
  return ((AllocatorObject *)self)->rec;
}

/* ---- module functions ---------------------------------------------- */

/* Sums over the open allocators of this module (and the process
 * allocator when it exists), for scralloc.memory_usage(). */
static PyObject *
mod_heap_totals(PyObject *module, PyObject *unused)
{
  module_state *st = get_state(module);
  AllocatorObject *a;
  unsigned long long total = 0, used = 0, meta = 0, bytes = 0, count = 0;
  struct scr_stats s;

  for (a = st->open; a != NULL; a = a->next) {
    memset(&s, 0, sizeof s);
    if (_scr_py_heap_stats(a->rec, &s) < 0)
      continue;                 /* closed; its heap went with Python's last block */
    total += s.heap_total;
    used += s.heap_used;
    meta += s.meta_bytes;
    bytes += s.bytes;
    count++;
  }
#if SCR_HAVE_PROCESS
  memset(&s, 0, sizeof s);
  scr_stats(&s);
  total += s.heap_total;
  used += s.heap_used;
  meta += s.meta_bytes;
  bytes += s.bytes;
#endif
  return Py_BuildValue("{sKsKsKsKsK}", "heap_total", total, "heap_used", used, "meta_bytes",
                       meta, "bytes", bytes, "allocators", count);
}

static PyObject *
mod_process_stats(PyObject *module, PyObject *unused)
{
#if SCR_HAVE_PROCESS
  struct scr_stats s;
  PyObject *d;

  memset(&s, 0, sizeof s);
  scr_stats(&s);
  d = stats_to_dict(&s);
#ifdef SCR_PROCESS_STATS_FIELDS
  if (d != NULL) {
    struct scr_process_stats ps;
    PyObject *p = PyDict_New();

    memset(&ps, 0, sizeof ps);
    scr_process_stats(&ps);
    if (p == NULL)
      goto fail;
#define X(name, doc)                       \
  if (put_u64(p, #name, ps.name) < 0)      \
    goto fail;
    SCR_PROCESS_STATS_FIELDS(X)
#undef X
    if (PyDict_SetItemString(d, "process", p) < 0)
      goto fail;
    Py_DECREF(p);
    return d;
  fail:
    Py_XDECREF(p);
    Py_DECREF(d);
    return NULL;
  }
#endif
  return d;
#else
  Py_RETURN_NONE;
#endif
}

static PyObject *
mod_size_class(PyObject *module, PyObject *arg)
{
  size_t n;
  if (get_size(arg, "size_class", "size", &n) < 0)
    return NULL;
  return PyLong_FromLong(scr_size_class(n));
}

static PyObject *
mod_strerror(PyObject *module, PyObject *arg)
{
  int overflow = 0;
  long code = PyLong_AsLongAndOverflow(arg, &overflow);
  if (code == -1 && PyErr_Occurred())
    return NULL;
  if (overflow != 0 || code < INT_MIN || code > INT_MAX)
    code = -1;
  return PyUnicode_FromString(strerror_of((int)code));
}

static PyObject *
mod_debug_fail_os_call(PyObject *module, PyObject *arg)
{
  size_t n;
  if (get_size(arg, "debug_fail_os_call", "n", &n) < 0)
    return NULL;
  scr_debug_fail_os_call((unsigned long)n);
  Py_RETURN_NONE;
}

static PyObject *
mod_debug_os_calls(PyObject *module, PyObject *unused)
{
  return PyLong_FromUnsignedLong(scr_debug_os_calls());
}

static PyObject *
mod_debug_advance_clock(PyObject *module, PyObject *arg)
{
  size_t ms;
  if (get_size(arg, "debug_advance_clock", "ms", &ms) < 0)
    return NULL;
  scr_debug_advance_clock((unsigned long)ms);
  Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
  {"_heap_totals", mod_heap_totals, METH_NOARGS,
   "_heap_totals($module, /)\n--\n\nSums of heap_total, heap_used, meta_bytes, bytes over the "
   "open allocators."},
  {"process_stats", mod_process_stats, METH_NOARGS,
   "process_stats($module, /)\n--\n\nThe process allocator's stats() dict, or None when this build "
   "has no process allocator."},
  {"size_class", mod_size_class, METH_O,
   "size_class($module, size, /)\n--\n\nThe size class of a request, -1 above SMALL_MAX."},
  {"strerror", mod_strerror, METH_O,
   "strerror($module, code, /)\n--\n\nThe text of a scralloc error code."},
  {"debug_fail_os_call", mod_debug_fail_os_call, METH_O,
   "debug_fail_os_call($module, n, /)\n--\n\nMake the n-th OS call from now fail with ENOMEM (0 "
   "disables).  Process-wide; for tests."},
  {"debug_os_calls", mod_debug_os_calls, METH_NOARGS,
   "debug_os_calls($module, /)\n--\n\nOS calls made by the whole process so far."},
  {"_profile", mod_profile, METH_O,
   "_profile($module, native, /)\n--\n\nThe live samples of every heap and the process "
   "allocator, as scralloc.sites makes them into a Profile."},
  {"_set_frames_root", (PyCFunction)(void (*)(void))mod_set_frames_root, METH_FASTCALL,
   "_set_frames_root($module, code, trim_file, /)\n--\n\nSamples' Python frames stop below "
   "the frames of code, and leave out those of trim_file just below it (a runner's); None, "
   "None: every frame."},
  {"_python_frames", mod_python_frames, METH_O,
   "_python_frames($module, len, /)\n--\n\nWhat the frames hook writes on this thread into a "
   "buffer of len bytes (at most 4096), for tests."},
  {"_lang_hook", mod_lang_hook, METH_NOARGS,
   "_lang_hook($module, /)\n--\n\nThe address of the Python frames hook "
   "(scr_profile_lang_hook), for a preloaded libscralloc.so."},
  {"_profile_symbol", mod_profile_symbol, METH_O,
   "_profile_symbol($module, pc, /)\n--\n\nThe name of the code at a return address."},
  {"write_profile", (PyCFunction)(void (*)(void))mod_profile_write, METH_VARARGS | METH_KEYWORDS,
   "write_profile($module, /, path, format='folded', *, native=False)\n--\n\nWrite the live "
   "samples of every heap and the process allocator to path: 'folded', 'pprof', 'blame' or "
   "'top'."},
  {"debug_advance_clock", mod_debug_advance_clock, METH_O,
   "debug_advance_clock($module, ms, /)\n--\n\nMove the clock purge_delay_ms is measured on ms "
   "milliseconds ahead.  Process-wide; for tests."},
  {NULL, NULL, 0, NULL},
};

/* ---- module init (PEP 489) ----------------------------------------- */

static int
add_u64(PyObject *m, const char *name, unsigned long long v)
{
  PyObject *o = PyLong_FromUnsignedLongLong(v);
  int r;
  if (o == NULL)
    return -1;
  r = PyModule_AddObjectRef(m, name, o);
  Py_DECREF(o);
  return r;
}

static int
add_new(PyObject *m, const char *name, PyObject *o)
{
  int r;
  if (o == NULL)
    return -1;
  r = PyModule_AddObjectRef(m, name, o);
  Py_DECREF(o);
  return r;
}

static const struct {
  const char *name;
  int code;
} error_codes[] = {
#define ERROR_ENTRY(name, value, msg) {#name, name},
  SCR_ERRORS(ERROR_ENTRY)
#undef ERROR_ENTRY
};

static int
add_doc(PyObject *d, const char *name, const char *doc)
{
  PyObject *v = PyUnicode_FromString(doc);
  int r;
  if (v == NULL)
    return -1;
  r = PyDict_SetItemString(d, name, v);
  Py_DECREF(v);
  return r;
}

static PyObject *
field_docs(int classes)
{
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
#define X(name, doc)                                 \
  if (add_doc(d, #name, doc) < 0) {                  \
    Py_DECREF(d);                                    \
    return NULL;                                     \
  }
  if (classes) {
    SCR_CLASS_STATS_FIELDS(X)
  } else {
    SCR_STATS_FIELDS(X)
  }
#undef X
  return d;
}

static PyObject *
option_docs(void)
{
  PyObject *d = PyDict_New();
  size_t i;
  if (d == NULL)
    return NULL;
  for (i = 0; i < OPTION_COUNT; i++) {
    const option_desc *o = &option_table[i];
    PyObject *t = Py_BuildValue("{sKsKsKss}", "default", o->def, "min", o->lo, "max", o->hi,
                                "doc", o->doc);
    if (t == NULL || PyDict_SetItemString(d, o->name, t) < 0) {
      Py_XDECREF(t);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(t);
  }
  return d;
}

static int
module_exec(PyObject *m)
{
  module_state *st = get_state(m);
  PyObject *classes, *attrs;
  size_t i;

  st->open = NULL;
  st->Block_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Block_spec, NULL);
  if (st->Block_type == NULL)
    return -1;
  st->Allocator_type = allocator_type_new(m);
  if (st->Allocator_type == NULL)
    return -1;
  if (PyModule_AddType(m, st->Allocator_type) < 0 || PyModule_AddType(m, st->Block_type) < 0)
    return -1;

  attrs = Py_BuildValue("{sOsOsO}", "address", Py_None, "reason", Py_None, "code", Py_None);
  if (attrs == NULL)
    return -1;
  st->InvalidPointerError = PyErr_NewExceptionWithDoc(
      "scralloc.InvalidPointerError",
      "An address the allocator does not own, an interior address, or a block never handed "
      "out.  Attributes: address (int), reason (str), code (the scralloc error code).",
      PyExc_ValueError, attrs);
  Py_DECREF(attrs);
  if (st->InvalidPointerError == NULL)
    return -1;
  st->DoubleFreeError = PyErr_NewExceptionWithDoc(
      "scralloc.DoubleFreeError", "A block of this allocator that is already free.",
      st->InvalidPointerError, NULL);
  if (st->DoubleFreeError == NULL)
    return -1;
  if (add_new(m, "ScrallocWarning",
              PyErr_NewExceptionWithDoc(
                  "scralloc.ScrallocWarning",
                  "What the core reports outside a call's result: a SCRALLOC_* environment "
                  "value it ignores, a failed munmap, the heap validator's findings.",
                  PyExc_RuntimeWarning, NULL)) < 0)
    return -1;
  scr_set_error_handler(report_to_warnings, NULL);
  if (PyModule_AddObjectRef(m, "InvalidPointerError", st->InvalidPointerError) < 0 ||
      PyModule_AddObjectRef(m, "DoubleFreeError", st->DoubleFreeError) < 0)
    return -1;

  if (PyModule_AddStringConstant(m, "VERSION", SCR_VERSION) < 0 ||
      PyModule_AddStringConstant(m, "__version__", SCR_VERSION) < 0 ||
      add_new(m, "version_info",
              Py_BuildValue("(iii)", SCR_VERSION_MAJOR, SCR_VERSION_MINOR, SCR_VERSION_PATCH)) < 0 ||
      add_u64(m, "PAGE_SIZE", SCR_PAGE_SIZE) < 0 ||
      add_u64(m, "SEGMENT_SIZE", SCR_SEGMENT_SIZE) < 0 ||
      add_u64(m, "SMALL_MAX", SCR_SMALL_MAX) < 0 ||
      add_u64(m, "MIN_ALIGN", SCR_MIN_ALIGN) < 0 ||
      add_u64(m, "CLASS_COUNT", SCR_CLASS_COUNT) < 0 ||
      PyModule_AddIntConstant(m, "DEBUG", SCR_DEBUG) < 0 ||
      add_new(m, "HAVE_PROCESS", PyBool_FromLong(SCR_HAVE_PROCESS)) < 0)
    return -1;
  for (i = 0; i < sizeof error_codes / sizeof error_codes[0]; i++)
    if (PyModule_AddIntConstant(m, error_codes[i].name, error_codes[i].code) < 0)
      return -1;

  classes = PyTuple_New(SCR_CLASS_COUNT);
  if (classes == NULL)
    return -1;
  for (i = 0; i < SCR_CLASS_COUNT; i++) {
    PyObject *v = PyLong_FromSize_t(scr_class_size((unsigned)i));
    if (v == NULL) {
      Py_DECREF(classes);
      return -1;
    }
    PyTuple_SET_ITEM(classes, (Py_ssize_t)i, v);
  }
  if (add_new(m, "SIZE_CLASSES", classes) < 0 ||
      add_new(m, "OPTIONS", option_docs()) < 0 ||
      add_new(m, "STATS_FIELDS", field_docs(0)) < 0 ||
      add_new(m, "CLASS_STATS_FIELDS", field_docs(1)) < 0)
    return -1;
  if (_scr_py_serve_exec(m) < 0)
    return -1;
  if (add_u64(m, "PROFILE_DEFAULT_RATE", SCR_PROFILE_DEFAULT_RATE) < 0)
    return -1;
  /* Process-wide, like the error handler: every sample of this
   * extension's heaps taken on a thread running Python gets its frames. */
  scr_profile_set_lang_hook(python_frames, NULL);
  return 0;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
  module_state *st = get_state(m);
  Py_VISIT(st->Allocator_type);
  Py_VISIT(st->Block_type);
  Py_VISIT(st->InvalidPointerError);
  Py_VISIT(st->DoubleFreeError);
  return 0;
}

static int
module_clear(PyObject *m)
{
  module_state *st = get_state(m);
  Py_CLEAR(st->Allocator_type);
  Py_CLEAR(st->Block_type);
  Py_CLEAR(st->InvalidPointerError);
  Py_CLEAR(st->DoubleFreeError);
  return 0;
}

static void
module_free(void *m)
{
  (void)module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
  {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
  {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED},
#endif
#ifdef Py_mod_gil
  {Py_mod_gil, Py_MOD_GIL_USED},
#endif
  {0, NULL},
};

PyDoc_STRVAR(module_doc,
             "The C part of scralloc: Allocator objects over the scralloc core.\n"
             "Import the package `scralloc` instead.");

static struct PyModuleDef scralloc_module = {
  PyModuleDef_HEAD_INIT,
  .m_name = "scralloc._scralloc",
  .m_doc = module_doc,
  .m_size = sizeof(module_state),
  .m_methods = module_methods,
  .m_slots = module_slots,
  .m_traverse = module_traverse,
  .m_clear = module_clear,
  .m_free = module_free,
};

PyMODINIT_FUNC PyInit__scralloc(void);

PyMODINIT_FUNC
PyInit__scralloc(void)
{
  return PyModuleDef_Init(&scralloc_module);
}
