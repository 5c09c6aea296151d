/* Class queues: per size class, a doubly linked list of pages that have a
 * free slot or are empty.  Pages with live blocks come first; the
 * empty_count[c] empty pages (the retained ones) sit at the tail (after
 * an idle head: types.h).  When the head changes, the old head's live
 * blocks join class_bank and the new one's leave it. */
#include "internal.h"

static void queue_head_changed(scr_heap *h, unsigned c, const scr_page *old) {
  const scr_page *now = h->queue[c];
  if (now == old) return;
  if (old) h->class_bank[c] += old->used;
  if (now) h->class_bank[c] -= now->used;
}

void _scr_queue_push_front(scr_heap *h, scr_page *pg) {
  unsigned c = pg->cls;
  const scr_page *old = h->queue[c];
  scr_assert_internal(!pg->in_queue);
  pg->prev = NULL;
  pg->next = h->queue[c];
  if (h->queue[c]) h->queue[c]->prev = pg; else h->queue_tail[c] = pg;
  h->queue[c] = pg;
  pg->in_queue = 1;
  queue_head_changed(h, c, old);
}

void _scr_queue_push_back(scr_heap *h, scr_page *pg) {
  unsigned c = pg->cls;
  const scr_page *old = h->queue[c];
  scr_assert_internal(!pg->in_queue);
  pg->next = NULL;
  pg->prev = h->queue_tail[c];
  if (h->queue_tail[c]) h->queue_tail[c]->next = pg; else h->queue[c] = pg;
  h->queue_tail[c] = pg;
  pg->in_queue = 1;
  queue_head_changed(h, c, old);
}

void _scr_queue_remove(scr_heap *h, scr_page *pg) {
  unsigned c = pg->cls;
  const scr_page *old = h->queue[c];
  scr_assert_internal(pg->in_queue);
  if (pg->prev) pg->prev->next = pg->next; else h->queue[c] = pg->next;
  if (pg->next) pg->next->prev = pg->prev; else h->queue_tail[c] = pg->prev;
  pg->next = pg->prev = NULL;
  pg->in_queue = 0;
  queue_head_changed(h, c, old);
}
