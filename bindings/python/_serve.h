/* The seam between _scralloc.c (Allocator objects) and _serve.c (Python's
 * own allocations on a heap through PyMem_SetAllocator, and the peaks).
 *
 * Every Allocator has one record (scr_py_record), made with it and freed
 * with it.  The Allocator's methods reach its heap through the _scr_py_*
 * wrappers below: they take the record's lock when the heap serves
 * Python's raw domain (called without the GIL), and they keep the record's
 * heap_used mirror, from which the peak comes. */
#ifndef SCRALLOC_PY_SERVE_H
#define SCRALLOC_PY_SERVE_H

#include <Python.h>

#include "scralloc.h"

typedef struct scr_py_record scr_py_record;

/* The flags of the module's helper types (Block, Serving): garbage
 * collected, immutable, and made only by the module, where the Python
 * version has those flags. */
#ifdef Py_TPFLAGS_IMMUTABLETYPE
#define SCR_PY_IMMUTABLE Py_TPFLAGS_IMMUTABLETYPE
#else
#define SCR_PY_IMMUTABLE 0
#endif
#ifdef Py_TPFLAGS_DISALLOW_INSTANTIATION
#define SCR_PY_NO_NEW Py_TPFLAGS_DISALLOW_INSTANTIATION
#else
#define SCR_PY_NO_NEW 0
#endif
#define SCR_PY_HELPER_TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | SCR_PY_IMMUTABLE | SCR_PY_NO_NEW)

/* ---- defined in _scralloc.c ---- */
/* The record of an Allocator (self must be one). */
scr_py_record *_scr_py_record_of(PyObject *self);

/* ---- defined in _serve.c ---- */
/* A record for a new Allocator (no heap yet); NULL (no exception set)
 * when out of memory.  _scr_py_record_open gives it the heap __init__
 * made. */
scr_py_record *_scr_py_record_new(void);
void _scr_py_record_open(scr_py_record *r, scr_heap *h);
/* Frees the record of an Allocator being deallocated (never routed then:
 * routing holds a reference to the Allocator). */
void _scr_py_record_free(scr_py_record *r);
/* Close, in two steps.  _scr_py_close_check: -1 with RuntimeError while
 * a serve_python() block of the heap is open; else 0, after a full
 * collection when Python's blocks live (it gives them a chance to go).
 * _scr_py_close (after a 0 from the check, or with serving == 0): with
 * no block of Python's left the heap is destroyed and the record
 * unrouted, and it returns 0; else the record keeps the heap, the free of
 * Python's last block destroys it, and it returns how many are left. */
int _scr_py_close_check(scr_py_record *r);
long long _scr_py_close(scr_py_record *r);

/* The heap calls of the Allocator's methods, locked and tracked.  The
 * checked ones also return SCR_PY_EPYTHON for a block Python made. */
#define SCR_PY_EPYTHON 100
void *_scr_py_malloc(scr_py_record *r, size_t n);
void *_scr_py_calloc(scr_py_record *r, size_t count, size_t size);
void *_scr_py_aligned_alloc(scr_py_record *r, size_t alignment, size_t n);
int _scr_py_realloc_checked(scr_py_record *r, void *p, size_t n, void **out);
int _scr_py_free_checked(scr_py_record *r, void *p);
/* SCR_PY_EPYTHON if p is a live block Python made, else SCR_OK. */
int _scr_py_refuse_python(scr_py_record *r, const void *p);
/* 1: a live block the Allocator's methods made; 2: one Python made; 0:
 * no live block. */
int _scr_py_block_kind(scr_py_record *r, const void *p);
/* 0, or -1 (out untouched) once the heap is destroyed. */
int _scr_py_heap_stats(scr_py_record *r, struct scr_stats *out);
/* Lock around any other heap call (no Python call in between). */
void _scr_py_lock(scr_py_record *r);
void _scr_py_unlock(scr_py_record *r);

/* Profiles.  _scr_py_hook_begin/_end bracket the frames hook (GIL held):
 * Python's mem and obj blocks go to the allocators that were there before
 * serve_python meanwhile.  _scr_py_record_heap: the record's heap, NULL once destroyed (a closed
 * Allocator's heap lives on while Python's blocks do). */
void _scr_py_hook_begin(void);
void _scr_py_hook_end(void);
scr_heap *_scr_py_record_heap(scr_py_record *r);
/* watch_peak: from > 0 keeps a copy of the heap's live samples each time
 * heap_used reaches a new high of at least from (1/8 above the last
 * copy); 0 stops and drops the copy.  _scr_py_peak_samples calls fn for
 * each sample of the copy (kind 1: a block of the Allocator's methods, 2:
 * Python's), with *used the heap_used it was taken at; returns the
 * samples visited, -1 when fn returned nonzero (fn's exception set). */
/* pause 1: Python's new blocks go to the allocators that were there
 * before serve_python (a profile's records stay off the heaps they
 * describe) until the matching pause 0.  GIL held. */
void _scr_py_pause_routing(int pause);
typedef int scr_py_snap_visit(const scr_profile_sample *s, int kind, void *arg);
void _scr_py_watch_peak(scr_py_record *r, uint64_t from);
long long _scr_py_peak_samples(scr_py_record *r, scr_py_snap_visit *fn, void *arg,
                               uint64_t *used);

/* Adds peak_heap_used and the per-domain figures ("python") to a stats()
 * dict; 0 or -1 with an exception. */
int _scr_py_stats_add(scr_py_record *r, PyObject *d);

/* Allocator methods and getters. */
PyObject *_scr_py_serve_python(PyObject *self, PyObject *args, PyObject *kwds);
PyObject *_scr_py_reset_peak(PyObject *self, PyObject *unused);
PyObject *_scr_py_get_peak(PyObject *self, void *closure);
PyObject *_scr_py_get_python_blocks(PyObject *self, void *closure);

/* Module exec: the Serving type and the module functions of _serve.c. */
int _scr_py_serve_exec(PyObject *m);

#endif /* SCRALLOC_PY_SERVE_H */
