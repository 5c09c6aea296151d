/* The record of bench/malloc_trace.c's traces, which
 * bench/malloc_replay.c reads: one per call, in the order the calls
 * returned (the tracer serializes them), 40 bytes, native byte order. */
#ifndef SCR_MALLOC_TRACE_H
#define SCR_MALLOC_TRACE_H
#include <stdint.h>

enum {
  SCR_TRACE_MALLOC = 'm',  /* out = malloc(size) */
  SCR_TRACE_CALLOC = 'c',  /* out = calloc(1, size) */
  SCR_TRACE_REALLOC = 'r', /* out = realloc(in, size) (out 0: freed, size 0) */
  SCR_TRACE_FREE = 'f',    /* free(in) */
  SCR_TRACE_ALIGNED = 'a', /* out = aligned allocation of size at align */
};

typedef struct {
  uint8_t op;     /* SCR_TRACE_* */
  uint8_t thread; /* threads numbered by their first call (255: any later) */
  uint16_t pad;
  uint32_t align; /* SCR_TRACE_ALIGNED only */
  uint64_t in;    /* the block passed in (free, realloc) */
  uint64_t out;   /* the block returned */
  uint64_t size;  /* bytes asked for */
  uint64_t ns;    /* CLOCK_MONOTONIC when the call returned */
} scr_trace_rec;

_Static_assert(sizeof(scr_trace_rec) == 40, "the trace format is 40-byte records");
#endif
