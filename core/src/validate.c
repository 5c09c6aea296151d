/* The heap validator: every page, every class queue, every counter.
 * Debug builds (SCR_DEBUG >= 3) run it at each slow-path state change;
 * scr_heap_validate() runs it on demand. */
#include "internal.h"

static bool validate(const scr_heap *h) {
  uint64_t committed = 0, mmaps = 0, reserved = 0, large_live = 0, large_bytes = 0;
  uint64_t class_pages[SCR_CLASS_COUNT] = {0}, class_live[SCR_CLASS_COUNT] = {0}, dirty = 0, over = 0;
  for (const scr_segment *seg = h->segments; seg; seg = seg->next) {
    if (seg->magic != SCR_SEGMENT_MAGIC || seg->heap != h) SCR_VALIDATE_FAIL("segment %p: bad header", (void *)seg);
    if (_scr_segmap_get(seg) != seg) SCR_VALIDATE_FAIL("segment %p: not in the segment map", (void *)seg);
    if (seg->next && seg->next->prev != seg) SCR_VALIDATE_FAIL("segment list broken at %p", (void *)seg);
    mmaps++;
    reserved += seg->size;
    if (seg->kind == SCR_SEG_HUGE) {
      committed += seg->size;
      if (seg->huge_live) large_live++, large_bytes += seg->huge_size;
      continue;
    }
    unsigned used = 0;
    for (unsigned i = SCR_FIRST_PAGE; i < SCR_PAGES_PER_SEGMENT; i++) {
      const scr_page *pg = &seg->pages[i];
      bool is_free = (seg->free_mask >> i) & 1;
      if (is_free != (pg->kind == SCR_PAGE_FREE)) SCR_VALIDATE_FAIL("page %u of %p: free mask disagrees", i, (void *)seg);
      if (scr_seg_tag(seg, i) != scr_page_tag_of(pg)) SCR_VALIDATE_FAIL("page %u of %p: tag disagrees", i, (void *)seg);
      if (is_free) {
        if ((seg->committed_free_mask >> i) & 1) committed += SCR_PAGE_SIZE;
        continue;
      }
      used++;
      committed += SCR_PAGE_SIZE;
      if (pg->kind == SCR_PAGE_SMALL) {
        if (!_scr_page_validate(pg)) SCR_VALIDATE_FAIL("page %u of %p: slots inconsistent", i, (void *)seg);
        class_pages[pg->cls]++;
        class_live[pg->cls] += pg->used;
        bool room = pg->free || pg->capacity < pg->reserved;
        if (room && !pg->in_queue) SCR_VALIDATE_FAIL("page %u of %p: has room but is not queued", i, (void *)seg);
      } else if (pg->kind == SCR_PAGE_RUN_TAIL) {
        const scr_page *head = &seg->pages[pg->head];
        if (pg->head >= i || head->kind != SCR_PAGE_SMALL || head->cls != pg->cls || i >= pg->head + head->span)
          SCR_VALIDATE_FAIL("page %u of %p: run tail without its run", i, (void *)seg);
      } else if (pg->kind == SCR_PAGE_LARGE) {
        if (pg->used) large_live++, large_bytes += (uint64_t)pg->span * SCR_PAGE_SIZE - _scr_large_colour(pg);
        if (pg->used == pg->cached) SCR_VALIDATE_FAIL("large page %u of %p: live and cached disagree", i, (void *)seg);
        if (pg->line_off != 0 && pg->line_off != SCR_COLOUR_LINES)
          SCR_VALIDATE_FAIL("large page %u of %p: colour %u lines", i, (void *)seg, (unsigned)pg->line_off);
      }
    }
    if (used != seg->used_pages) SCR_VALIDATE_FAIL("segment %p: used_pages %u, counted %u", (void *)seg, seg->used_pages, used);
    unsigned run = 0;
    for (uint64_t m = seg->free_mask; m; m &= m >> 1) run++;
    if (seg->avail_run != run) SCR_VALIDATE_FAIL("segment %p: avail_run %u, its longest free run %u", (void *)seg, seg->avail_run, run);
    if (run && (seg->avail_at + run > 64 || (seg->free_mask & _scr_run_mask(seg->avail_at, run)) != _scr_run_mask(seg->avail_at, run)))
      SCR_VALIDATE_FAIL("segment %p: no free run of %u pages at page %u", (void *)seg, run, seg->avail_at);
    if ((seg->dirty_new & seg->dirty_old) != 0 ||
        ((seg->dirty_new | seg->dirty_old) & ~seg->committed_free_mask) != 0)
      SCR_VALIDATE_FAIL("segment %p: dirty masks overlap or hold pages that are not committed and free", (void *)seg);
    if ((seg->committed_free_mask & ~seg->free_mask) != 0) SCR_VALIDATE_FAIL("segment %p: committed free mask holds used pages", (void *)seg);
    if ((seg->dirty_over & (seg->dirty_new | seg->dirty_old)) != 0 || (seg->dirty_over & ~seg->committed_free_mask) != 0)
      SCR_VALIDATE_FAIL("segment %p: pages waiting for the batched decommit are dirty too, or not committed and free", (void *)seg);
    dirty += (uint64_t)_scr_popcount(seg->dirty_new | seg->dirty_old);
    over += (uint64_t)_scr_popcount(seg->dirty_over);
  }
  if (over != h->over_pages) SCR_VALIDATE_FAIL("over_pages %llu, counted %llu", (unsigned long long)h->over_pages, (unsigned long long)over);
  if (over != 0 && over * SCR_PAGE_SIZE >= h->opt.decommit_batch) SCR_VALIDATE_FAIL("%llu pages wait for a batch of %zu bytes", (unsigned long long)over, h->opt.decommit_batch);
  if (dirty != h->dirty_pages) SCR_VALIDATE_FAIL("dirty_pages %llu, counted %llu", (unsigned long long)h->dirty_pages, (unsigned long long)dirty);
  if (h->opt.purge_delay_ms == 0 && dirty != 0) SCR_VALIDATE_FAIL("dirty pages without a purge delay");
  for (unsigned r = 0; r < SCR_PAGES_PER_SEGMENT; r++) {
    if (((h->avail_runs >> r) & 1) != (h->avail[r] != NULL)) SCR_VALIDATE_FAIL("avail_runs bit %u and its list disagree", r);
    for (const scr_segment *seg = h->avail[r]; seg; seg = seg->avail_next)
      if (seg->avail_run != r || seg->kind != SCR_SEG_NORMAL) SCR_VALIDATE_FAIL("avail list %u holds %p", r, (void *)seg);
  }
  uint64_t retained = 0;
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    unsigned empties = 0;
    bool seen_empty = false;
    for (const scr_page *pg = h->queue[c]; pg; pg = pg->next) {
      if (pg->cls != c || !pg->in_queue) SCR_VALIDATE_FAIL("class %u queue holds a foreign page", c);
      if (pg->next == NULL && h->queue_tail[c] != pg) SCR_VALIDATE_FAIL("class %u queue tail wrong", c);
      if (pg->counted && pg->used != 0) SCR_VALIDATE_FAIL("class %u: a counted page with live blocks", c);
      if (pg->used == 0 && !pg->counted) { /* idle */
        if (pg != h->queue[c] || pg->span != 1 || !h->keep_current)
          SCR_VALIDATE_FAIL("class %u: an idle page that is not the head of one page (keep_current %u)", c, h->keep_current);
        continue;
      }
      if (pg->used == 0) empties++, seen_empty = true;
      else if (seen_empty) SCR_VALIDATE_FAIL("class %u: a used page after an empty one", c);
    }
    if (empties != h->empty_count[c]) SCR_VALIDATE_FAIL("class %u: %u empty pages, count says %u", c, empties, h->empty_count[c]);
    unsigned idle = _scr_heap_idle_page(h, c) != NULL;
    if (empties + idle > h->opt.retain) SCR_VALIDATE_FAIL("class %u: %u retained pages above retain=%u", c, empties + idle, h->opt.retain);
    if (class_pages[c] != h->class_pages[c]) SCR_VALIDATE_FAIL("class %u: page count", c);
    if (h->idle_retain[c] != (h->keep_current && _scr_class_span(c) == 1 ? h->opt.retain : 0))
      SCR_VALIDATE_FAIL("class %u: idle_retain %u, keep_current %u, retain %u", c, h->idle_retain[c], h->keep_current, (unsigned)h->opt.retain);
    if (class_live[c] != _scr_class_live(h, c)) SCR_VALIDATE_FAIL("class %u: live count", c);
    retained += (uint64_t)empties * _scr_class_span(c);
  }
  if (retained != h->retained_pages) SCR_VALIDATE_FAIL("retained pages %llu, counted %llu", (unsigned long long)h->retained_pages, (unsigned long long)retained);
  if (retained + dirty > h->keep_pages) SCR_VALIDATE_FAIL("retained and dirty pages above the cap");
  uint64_t cached = 0;
  for (uint32_t i = 0; i < h->cache_count; i++) cached += h->cache[i].size;
  if (cached != h->cache_bytes) SCR_VALIDATE_FAIL("large cache bytes");
  if (mmaps != h->mmaps) SCR_VALIDATE_FAIL("mmaps %llu, counted %llu", (unsigned long long)h->mmaps, (unsigned long long)mmaps);
  if (reserved != h->reserved) SCR_VALIDATE_FAIL("reserved bytes");
  if (committed != h->bytes) SCR_VALIDATE_FAIL("bytes %llu, counted %llu", (unsigned long long)h->bytes, (unsigned long long)committed);
  if (large_live != h->large_live || large_bytes != h->large_bytes) SCR_VALIDATE_FAIL("large block counts");
  return true;
}

/* Under the heap's lock: the decay may be giving back pages meanwhile. */
static bool validate_locked(const scr_heap *h) {
  pthread_mutex_t *lock = (pthread_mutex_t *)&h->lock;
  pthread_mutex_lock(lock);
  bool ok = validate(h);
  pthread_mutex_unlock(lock);
  return ok;
}

int scr_heap_validate(const scr_heap *h) {
  if (!_scr_heap_live(h)) {
    _scr_heap_bad("scr_heap_validate", h);
    return SCR_EINVAL;
  }
  return validate_locked(h) ? SCR_OK : SCR_EINVAL;
}

void _scr_heap_validate_or_abort(const scr_heap *h) {
  if (!validate_locked(h)) _scr_assert_fail("heap validator", __FILE__, __LINE__);
}
