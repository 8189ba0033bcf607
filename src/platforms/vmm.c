/* vmm.c — growable platforms over one reserved address range: the engine (HOST_VMM's backend is
 * vmm_host.c, DEVICE_VMM's vmm_device.c).
 *
 * The engine reserves a range once and maps memory into it on demand. An allocation goes at the
 * top of what is mapped (or, once the top is full, into the first hole that fits), and a live
 * allocation grows in place when the addresses after it are unmapped, or shrinks by giving back
 * whole mappings at its end (rapi_resizable, rap_internal.h). Each mapping (an extent) is what one
 * backend call made and goes back whole, as CUDA requires of cuMemUnmap; the host backend obeys
 * the same rule so that the host tests exercise the logic the device runs. Allocations are
 * recorded in the tracked body (tracked.c), whose lock covers the engine too.
 * Invariant: extents are in address order, disjoint, inside the range; a live allocation is a run
 * of touching extents that starts at its pointer and spans its recorded bytes.
 */
#include "platforms/vmm.h"

#include <stdio.h>
#include <string.h>

/* ---- extents ---------------------------------------------------------------------------------- */

static char *range_end(const rapi_vmm *v) { return v->base + v->reserve; }
static char *extent_end(const rapi_vmm_extent *e) { return e->addr + e->size; }

static _Thread_local long map_countdown, unmap_countdown;
void rapi_vmm_fail_map_at(long nth) { map_countdown = nth; }
void rapi_vmm_fail_unmap_at(long nth) { unmap_countdown = nth; }

/* Every unmap goes through here, counted; a sleep's and one inside an allocation take the test
 * seam (seam true). */
static int backend_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share, bool seam) {
  if (seam && RAPI_UNLIKELY(unmap_countdown > 0) && --unmap_countdown == 0)
    return rapi_fail(RAP_ERR_BACKEND, "%s: unmapping %p failed (injected)",
                     rap_allocator_name(v->self), (void *)addr);
  v->unmap_calls++;
  return v->ops->unmap(v, addr, size, share);
}

static int sleep_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  return backend_unmap(v, addr, size, share, true);
}

/* Every map goes through here, so that the test seam covers growth and wake alike. */
static int backend_map(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  if (RAPI_UNLIKELY(map_countdown > 0) && --map_countdown == 0) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, size);
    return rapi_fail(RAP_ERR_NOMEM, "%s: mapping %s at %p failed: out of memory (injected)",
                     rap_allocator_name(v->self), sz, (void *)addr);
  }
  v->map_calls++;
  return v->ops->map(v, addr, size, share);
}

/* Maps [addr, addr+size) as one extent linked after `after` (NULL: first). */
static int map_extent(rapi_vmm *v, char *addr, size_t size, rapi_vmm_extent *after) {
  rapi_vmm_extent *e = rapi_malloc(sizeof *e);
  if (e == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a mapping record",
                     rap_allocator_name(v->self));
  memset(&e->share, 0, sizeof e->share);
  e->share.fd = -1;
  e->share.slot = UINT32_MAX;
  int st = backend_map(v, addr, size, &e->share);
  if (st != RAP_OK) {
    free(e);
    return st;
  }
  e->addr = addr;
  e->size = size;
  e->asleep = false;
  e->fresh = false;
  e->exported = false;
  /* An exporting platform publishes the mapping, so that importers can open it (ipc.c). */
  if (v->ipc != NULL && (st = rapi_ipc_extent_add(v, e, false)) != RAP_OK) {
    (void)backend_unmap(v, addr, size, &e->share, false);
    free(e);
    return st;
  }
  e->prev = after;
  e->next = after ? after->next : v->first;
  if (e->next) e->next->prev = e;
  else v->last = e;
  if (after) after->next = e;
  else v->first = e;
  v->extents++;
  v->mapped += size;
  if (v->mapped > v->mapped_hwm) v->mapped_hwm = v->mapped;
  rapi_segment_notify(v->self, RAP_SEGMENT_MAP, addr, size, addr, size);
  return RAP_OK;
}

/* Unmaps e and forgets it; on failure e stays, still mapped, and the status is returned. */
static int unmap_extent(rapi_vmm *v, rapi_vmm_extent *e) {
  if (v->ipc != NULL) rapi_ipc_extent_remove(v, e);   /* importers stop opening it first */
  if (!e->asleep) rapi_segment_notify(v->self, RAP_SEGMENT_UNMAP, e->addr, e->size, e->addr, e->size);
  int st = e->asleep ? RAP_OK : backend_unmap(v, e->addr, e->size, &e->share, false);
  if (st != RAP_OK) {
    rapi_segment_notify(v->self, RAP_SEGMENT_MAP, e->addr, e->size, e->addr, e->size);   /* kept */
    return st;
  }
  if (!e->asleep) v->mapped -= e->size;
  if (v->hint == e) v->hint = NULL;
  if (e->prev) e->prev->next = e->next;
  else v->first = e->next;
  if (e->next) e->next->prev = e->prev;
  else v->last = e->prev;
  v->extents--;
  free(e);
  return RAP_OK;
}

/* Makes what another process opens e by, where the backend leaves it to the first export. */
static int share_extent(rapi_vmm *v, rapi_vmm_extent *e) {
  if (v->ops->share == NULL || e->share.shared) return RAP_OK;
  int st = v->ops->share(v, &e->share, e->size);
  if (st != RAP_OK) return st;
  e->exported = true;
  rapi_ipc_extent_shared(v, e);
  return RAP_OK;
}

/* The last extent that starts below end, searched from the top, where growth happens. */
static rapi_vmm_extent *extent_below(const rapi_vmm *v, const char *end) {
  rapi_vmm_extent *e = v->last;
  while (e != NULL && e->addr >= end) e = e->prev;
  return e;
}

/* Unmaps every extent inside [from, to), from the top down; stops at the first failure. */
static int unmap_range(rapi_vmm *v, char *from, char *to) {
  rapi_vmm_extent *e = extent_below(v, to);
  while (e != NULL && e->addr >= from) {
    rapi_vmm_extent *prev = e->prev;
    int st = unmap_extent(v, e);
    if (st != RAP_OK) return st;
    e = prev;
  }
  return RAP_OK;
}

/* Maps [addr, addr+size) after `after`: one extent, or on an exporting platform pieces of at most
 * RAPI_IPC_PIECE, so that an importer maps only the pieces a block lies in and opening a pool
 * costs the same whatever its size (ipc.c). On failure the pieces this call made go back. */
/* With piece= the pieces lie at multiples of it, so that a pool knows where they are. */
static int map_run(rapi_vmm *v, char *addr, size_t size, rapi_vmm_extent *after) {
  size_t piece = v->ipc != NULL ? rapi_align_up(RAPI_IPC_PIECE, v->granularity) : size;
  for (size_t done = 0; done < size;) {
    size_t n = size - done < piece ? size - done : piece;
    if (v->piece != 0) {
      size_t to_next = v->piece - (size_t)((uintptr_t)(addr + done) & (v->piece - 1));
      n = size - done < to_next ? size - done : to_next;
    }
    int st = map_extent(v, addr + done, n, after);
    if (st != RAP_OK) {
      (void)unmap_range(v, addr, addr + done);
      return st;
    }
    after = after != NULL ? after->next : v->first;   /* the extent just made */
    done += n;
  }
  return RAP_OK;
}

/* Where size bytes go: the top of what is mapped if there is room, else the first hole. */
static char *place(const rapi_vmm *v, size_t size, rapi_vmm_extent **after) {
  char *top = v->last ? extent_end(v->last) : v->base;
  if ((size_t)(range_end(v) - top) >= size) {
    *after = v->last;
    return top;
  }
  char *hole = v->base;
  for (rapi_vmm_extent *e = v->first; e != NULL; e = e->next) {
    if ((size_t)(e->addr - hole) >= size) {
      *after = e->prev;
      return hole;
    }
    hole = extent_end(e);
  }
  return NULL;
}

static int no_room(rapi_vmm *v, size_t size) {
  char want[32], held[32], range[32];
  rapi_format_size(want, sizeof want, size);
  rapi_format_size(held, sizeof held, v->mapped);
  rapi_format_size(range, sizeof range, v->reserve);
  return rapi_fail(RAP_ERR_NOMEM, "%s: the reserved range of %s has no room for %s more (%s "
                   "mapped); a larger reserve= makes room", rap_allocator_name(v->self), range,
                   want, held);
}

/* ---- the tracked body's raw operations -------------------------------------------------------- */

static int vmm_raw_alloc(rapi_tracked *p, void **out, size_t bytes, rap_resource *r) {
  (void)r;   /* mapped memory is not stream-ordered */
  rapi_vmm *v = p->impl;
  if (bytes > v->reserve) return no_room(v, bytes);
  size_t size = rapi_align_up(bytes, v->granularity);
  rapi_vmm_extent *after = NULL;
  char *addr = place(v, size, &after);
  if (addr == NULL) return no_room(v, size);
  int st = map_run(v, addr, size, after);
  if (st != RAP_OK) return st;
  *out = addr;
  return RAP_OK;
}

static int vmm_raw_free(rapi_tracked *p, void *ptr, size_t bytes, rap_resource *r) {
  (void)r;
  rapi_vmm *v = p->impl;
  return unmap_range(v, ptr, (char *)ptr + rapi_align_up(bytes ? bytes : 1, v->granularity));
}

/* ---- resize in place: what pools over this platform call -------------------------------------- */

static int grow_in_place(rapi_vmm *v, char *ptr, size_t have, size_t want) {
  char *end = ptr + have;
  rapi_vmm_extent *below = extent_below(v, end);
  char *limit = below && below->next ? below->next->addr : range_end(v);
  if ((size_t)(limit - end) < want - have) return no_room(v, want - have);
  return map_run(v, end, want - have, below);
}

/* Gives back the whole extents above ptr + want; the new size is where the rest ends. */
static int shrink_in_place(rapi_vmm *v, char *ptr, size_t have, size_t want, size_t *now) {
  int st = unmap_range(v, ptr + want, ptr + have);
  rapi_vmm_extent *e = extent_below(v, ptr + have);
  *now = e != NULL && e->addr >= ptr ? (size_t)(extent_end(e) - ptr) : 0;
  return st;
}

static int vmm_resize(rap_allocator *a, void *ptr, size_t *bytes, size_t want) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  rapi_prec *rec = rapi_map_find(&p->map, ptr);
  int st = RAP_OK;
  if (want > v->reserve) {
    st = no_room(v, want);
  } else if (rec == NULL || rec->bytes != *bytes || want == 0) {
    st = rapi_fail(RAP_ERR_INVALID, "%s: resize of %p from %zu to %zu bytes: not a live allocation "
                   "of that size, or a size out of range", rap_allocator_name(a), ptr, *bytes, want);
  } else {
    size_t have = rapi_align_up(rec->bytes, v->granularity), now = have;
    size_t target = rapi_align_up(want, v->granularity);
    if (target > have) {
      st = grow_in_place(v, ptr, have, target);
      if (st == RAP_OK) now = target;
    } else if (target < have) {
      st = shrink_in_place(v, ptr, have, target, &now);
    }
    /* The record follows what is mapped, also after a shrink that stopped half way. */
    if (now != rec->bytes) {
      p->current = p->current - rec->bytes + now;
      p->actual = p->actual - rec->bytes + now;
      if (p->current > p->hwm) p->hwm = p->current;
      if (p->actual > p->actual_hwm) p->actual_hwm = p->actual;
      rec->bytes = now;
    }
    *bytes = now;
  }
  rapi_unlock(&held);
  return st;
}

/* ---- sleep and wake: the extents of one allocation unmapped and mapped again in place ---------- */

/* The live allocation at ptr (its first extent and where it ends), under the lock; or a sentence. */
static int sleep_target(rap_allocator *a, rapi_tracked *p, void *ptr, char **end, const char *fn) {
  rapi_vmm *v = p->impl;
  rapi_prec *rec = rapi_map_find(&p->map, ptr);
  if (rec == NULL)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "%s: %s of %p: not a live allocation",
                     rap_allocator_name(a), fn, ptr);
  *end = (char *)ptr + rapi_align_up(rec->bytes ? rec->bytes : 1, v->granularity);
  return RAP_OK;
}

/* Each extent of the allocation goes back to the backend and stays in the list, asleep, so that
 * nothing else is placed on its addresses; on failure those done stay asleep (resume undoes). */
int rapi_vmm_suspend(rap_allocator *a, void *ptr) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  char *end = NULL;
  int st = sleep_target(a, p, ptr, &end, "suspend");
  for (rapi_vmm_extent *e = v->first; st == RAP_OK && e != NULL && e->addr < end; e = e->next) {
    if (e->addr < (char *)ptr || e->asleep) continue;
    rapi_segment_notify(v->self, RAP_SEGMENT_UNMAP, e->addr, e->size, e->addr, e->size);
    /* Its row goes before its descriptor closes (the pool's hold saw no importer map it). */
    if (v->ipc != NULL) rapi_ipc_extent_remove(v, e);
    if ((st = sleep_unmap(v, e->addr, e->size, &e->share)) != RAP_OK) {
      rapi_segment_notify(v->self, RAP_SEGMENT_MAP, e->addr, e->size, e->addr, e->size);
      if (v->ipc != NULL && rapi_ipc_extent_add(v, e, true) != RAP_OK)
        rap_log(RAP_LOG_ERROR, "%s: %s", rap_allocator_name(a), rap_last_error());
      break;
    }
    e->asleep = true;
    v->mapped -= e->size;
  }
  rapi_unlock(&held);
  return st;
}

/* Each run of touching asleep extents is mapped again as one extent (one backend call: on the
 * device one cuMemCreate for what growth mapped in many pieces, so later sleeps and wakes cost one
 * call per run). If a map fails, the runs mapped by this call go back to sleep, so the allocation
 * is never left half mapped by it. */
int rapi_vmm_resume(rap_allocator *a, void *ptr) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  char *end = NULL;
  int st = sleep_target(a, p, ptr, &end, "resume");
  rapi_vmm_extent *e = st == RAP_OK ? v->first : NULL;
  for (; e != NULL && e->addr < end; e = e->next) {
    if (e->addr < (char *)ptr || !e->asleep) continue;
    size_t run = e->size;
    rapi_vmm_extent *last = e;
    /* With piece= each piece stays its own mapping, so that it can go back alone again; an
     * exporting platform keeps its pieces too, so that importers map at most one piece a row. */
    while (v->piece == 0 && v->ipc == NULL && last->next != NULL && last->next->asleep &&
           last->next->addr == extent_end(last) && last->next->addr < end) {
      last = last->next;
      run += last->size;
    }
    if ((st = backend_map(v, e->addr, run, &e->share)) != RAP_OK) break;
    /* Published once the wake copied its bytes back (the pool's unhold); shared at once where a
     * block in it was exported (a descriptor made before the sleep opens the new memory). */
    if (v->ipc != NULL && ((e->exported && (st = share_extent(v, e)) != RAP_OK) ||
                           (st = rapi_ipc_extent_add(v, e, true)) != RAP_OK)) {
      (void)backend_unmap(v, e->addr, run, &e->share, false);
      break;
    }
    rapi_vmm_extent *stop = last->next;
    while (e->next != stop) {   /* the run's records become e's */
      rapi_vmm_extent *n = e->next;
      if (v->hint == n) v->hint = NULL;
      e->next = n->next;
      if (n->next) n->next->prev = e;
      else v->last = e;
      v->extents--;
      free(n);
    }
    e->size = run;
    e->asleep = false;
    e->fresh = true;
    v->mapped += run;
    if (v->mapped > v->mapped_hwm) v->mapped_hwm = v->mapped;
  }
  for (rapi_vmm_extent *u = v->first; u != NULL; u = u->next) {
    if (!u->fresh) continue;
    u->fresh = false;
    if (st == RAP_OK) {
      rapi_segment_notify(v->self, RAP_SEGMENT_MAP, u->addr, u->size, u->addr, u->size);
      continue;
    }
    if (v->ipc != NULL) rapi_ipc_extent_remove(v, u);
    if (backend_unmap(v, u->addr, u->size, &u->share, false) != RAP_OK) {   /* kept: valid */
      rapi_segment_notify(v->self, RAP_SEGMENT_MAP, u->addr, u->size, u->addr, u->size);
      if (v->ipc != NULL && rapi_ipc_extent_add(v, u, true) != RAP_OK)
        rap_log(RAP_LOG_ERROR, "%s: %s", rap_allocator_name(a), rap_last_error());
      continue;
    }
    u->asleep = true;
    v->mapped -= u->size;
  }
  rapi_unlock(&held);
  return st;
}

/* rapi_resizable.hold: ipc.c does the table; nothing to do where nothing exports. */
int rapi_vmm_hold(rap_allocator *a, void *ptr, int how) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  if (v->ipc == NULL) return RAP_OK;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  char *end = NULL;
  int st = how == RAPI_HOLD_NOTICE ? RAP_OK : sleep_target(a, p, ptr, &end, "hold");
  if (st == RAP_OK) st = rapi_ipc_hold(v, NULL, ptr, end, how);
  rapi_unlock(&held);
  return st;
}

/* ---- pages inside a live allocation: pieces unmapped and mapped again in place -----------------
 * A pool over a platform made with piece= gives back the pieces wholly inside a large free block
 * of a chunk, and maps them again before it hands the bytes out. An unmapped piece stays in the
 * list, asleep, as a sleeping allocation's do: its addresses stay the allocation's, a shrink or a
 * free forgets it without a backend call, and a wake maps it again with the rest. */

/* The first extent that ends above addr, looked for from the hint (pools work near where they
 * worked last), or NULL. */
static rapi_vmm_extent *extent_from(rapi_vmm *v, const char *addr) {
  rapi_vmm_extent *e = v->hint != NULL ? v->hint : v->first;
  if (e == NULL) return NULL;
  if (extent_end(e) > addr) {
    while (e->prev != NULL && extent_end(e->prev) > addr) e = e->prev;
    return e;
  }
  while (e != NULL && extent_end(e) <= addr) e = e->next;
  return e;
}

/* Whether e is a piece unmap_inside gives back, and whether n continues e's run (touching, and a
 * backend that takes runs). */
static bool goes(const rapi_vmm_extent *e, const char *lo, const char *hi) {
  return !e->asleep && e->addr >= lo && extent_end(e) <= hi;
}

/* An exporting platform's mapping leaves the table before it goes: held first, as a sleep holds,
 * so that no importer maps it from now on; false (kept, published again) while another process
 * maps it, since unmapped here it would live on there and not come back to the device. */
static bool unpublish(rapi_vmm *v, rapi_vmm_extent *e) {
  if (v->ipc == NULL) return true;
  char kept[512];   /* the caller's sentence: a mapping that stays is no failure of the release */
  snprintf(kept, sizeof kept, "%s", rap_last_error());
  if (rapi_ipc_hold(v, e, e->addr, extent_end(e), RAPI_HOLD) != RAP_OK) {
    rap_log(RAP_LOG_DEBUG, "%s: a free mapping stays: %s", rap_allocator_name(v->self), rap_last_error());
    (void)rapi_fail(RAP_OK, "%s", kept);
    return false;
  }
  rapi_ipc_extent_remove(v, e);
  return true;
}

/* The other way: a mapping that came back (or stayed) is published again. */
static int publish(rapi_vmm *v, rapi_vmm_extent *e) {
  return v->ipc != NULL ? rapi_ipc_extent_add(v, e, false) : RAP_OK;
}
static bool joins_run(const rapi_vmm *v, const rapi_vmm_extent *e, const rapi_vmm_extent *n) {
  return v->ops->runs && n != NULL && n->addr == extent_end(e);
}

int rapi_vmm_unmap_inside(rap_allocator *a, void *lo, void *hi, size_t *bytes) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  int st = RAP_OK;
  rapi_vmm_extent *e = extent_from(v, lo);
  while (e != NULL && e->addr < (char *)hi) {
    if (!goes(e, lo, hi) || !unpublish(v, e)) {
      e = e->next;
      continue;
    }
    rapi_vmm_extent *last = e;
    size_t run = e->size;
    while (joins_run(v, last, last->next) && goes(last->next, lo, hi)) {
      last = last->next;
      run += last->size;
    }
    rapi_vmm_extent *stop = last->next;
    for (rapi_vmm_extent *u = e; u != stop; u = u->next)
      rapi_segment_notify(v->self, RAP_SEGMENT_UNMAP, u->addr, u->size, u->addr, u->size);
    if ((st = backend_unmap(v, e->addr, run, &e->share, true)) != RAP_OK) {
      for (rapi_vmm_extent *u = e; u != stop; u = u->next)   /* kept */
        rapi_segment_notify(v->self, RAP_SEGMENT_MAP, u->addr, u->size, u->addr, u->size);
      if (publish(v, e) != RAP_OK)
        rap_log(RAP_LOG_ERROR, "%s: %s", rap_allocator_name(v->self), rap_last_error());
      break;
    }
    for (rapi_vmm_extent *u = e; u != stop; u = u->next) u->asleep = true;
    v->mapped -= run;
    *bytes += run;
    v->hint = last;
    e = stop;
  }
  rapi_unlock(&held);
  return st;
}

int rapi_vmm_map_inside(rap_allocator *a, void *lo, void *hi, size_t *bytes) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  int st = RAP_OK;
  rapi_vmm_extent *from = extent_from(v, lo), *e = from;
  size_t done = 0;
  while (e != NULL && e->addr < (char *)hi) {
    if (!e->asleep) {
      e = e->next;
      continue;
    }
    rapi_vmm_extent *last = e;
    size_t run = e->size;
    while (joins_run(v, last, last->next) && last->next->asleep && last->next->addr < (char *)hi) {
      last = last->next;
      run += last->size;
    }
    if ((st = backend_map(v, e->addr, run, &e->share)) != RAP_OK) break;
    if ((st = publish(v, e)) != RAP_OK) {   /* an exporting platform maps no runs: e alone */
      (void)backend_unmap(v, e->addr, run, &e->share, false);
      break;
    }
    rapi_vmm_extent *stop = last->next;
    for (rapi_vmm_extent *u = e; u != stop; u = u->next) {
      u->asleep = false;
      u->fresh = true;
    }
    v->mapped += run;
    done += run;
    v->hint = last;
    e = stop;
  }
  if (v->mapped > v->mapped_hwm) v->mapped_hwm = v->mapped;
  /* Observers hear of what was mapped once all of it was; a failure unmaps it again (a piece at a
   * time: a backend that took a run takes its parts). */
  for (rapi_vmm_extent *u = from; u != NULL && u != e; u = u->next) {
    if (!u->fresh) continue;
    u->fresh = false;
    if (st == RAP_OK) {
      rapi_segment_notify(v->self, RAP_SEGMENT_MAP, u->addr, u->size, u->addr, u->size);
      continue;
    }
    if (v->ipc != NULL) rapi_ipc_extent_remove(v, u);   /* no importer saw it: just published */
    if (backend_unmap(v, u->addr, u->size, &u->share, true) != RAP_OK) {   /* kept: valid */
      rapi_segment_notify(v->self, RAP_SEGMENT_MAP, u->addr, u->size, u->addr, u->size);
      if (publish(v, u) != RAP_OK)
        rap_log(RAP_LOG_ERROR, "%s: %s", rap_allocator_name(v->self), rap_last_error());
      continue;
    }
    u->asleep = true;
    v->mapped -= u->size;
    done -= u->size;
  }
  *bytes += done;
  rapi_unlock(&held);
  return st;
}

size_t rapi_vmm_unmapped_inside(rap_allocator *a, void *lo, void *hi) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  size_t n = 0;
  for (rapi_vmm_extent *e = extent_from(v, lo); e != NULL && e->addr < (char *)hi; e = e->next)
    if (e->asleep) n += e->size;
  rapi_unlock(&held);
  return n;
}

bool rapi_vmm_pieces(rap_allocator *a, char **lo, char **hi, int how) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  char *from = NULL, *to = NULL;
  for (rapi_vmm_extent *e = extent_from(v, *lo); e != NULL && e->addr < *hi; e = e->next) {
    if (how != RAPI_PIECES_MEETING &&
        (e->addr < *lo || extent_end(e) > *hi || e->asleep != (how == RAPI_PIECES_UNMAPPED)))
      continue;
    if (from == NULL) from = e->addr;
    to = extent_end(e);
  }
  rapi_unlock(&held);
  if (from == NULL) return false;
  *lo = from;
  *hi = to;
  return true;
}

int rapi_vmm_calls(rap_allocator *a, size_t *maps, size_t *unmaps) {
  if (a == NULL || a->platform == NULL || a->platform->vmm == NULL || a->platform->root != a)
    return RAP_ERR_INVALID;
  rapi_tracked *p = a->state;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  *maps = a->platform->vmm->map_calls;
  *unmaps = a->platform->vmm->unmap_calls;
  rapi_unlock(&held);
  return RAP_OK;
}

/* ---- segment observers: a growable platform's segments are its mappings ------------------------ */

static void vmm_walk(rap_allocator *a, void *ctx, void (*locked)(void *arg),
                     void (*visit)(void *arg, int kind, void *base, size_t size, void *addr,
                                   size_t bytes),
                     void *arg) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = ctx;
  rapi_held held;
  rapi_lock(&p->lock, &held);
  locked(arg);
  for (rapi_vmm_extent *e = v->first; e != NULL; e = e->next)
    if (!e->asleep) visit(arg, RAP_SEGMENT_MAP, e->addr, e->size, e->addr, e->size);
  rapi_unlock(&held);
}

/* ---- memory across processes: the export entry of the record (rap_internal.h) --------------- */

static rapi_ipc_export *vmm_export_state(rap_allocator *root) { return root->platform->vmm->ipc; }

/* ipc.c asks, when a pool over this platform exports [ptr, ptr+bytes): its offset in the range;
 * the mappings it lies in are shared now if they were not yet. */
static int vmm_locate(rap_allocator *root, void *ptr, size_t bytes, rapi_ipc_place *out) {
  rapi_tracked *p = root->state;
  rapi_vmm *v = root->platform->vmm;
  if ((char *)ptr < v->base || (char *)ptr >= v->base + v->reserve)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_export: %p is not in the range of '%s'", ptr,
                     rap_allocator_name(root));
  out->offset = (uint64_t)((char *)ptr - v->base);
  rapi_held held;
  rapi_lock(&p->lock, &held);
  int st = RAP_OK;
  char *end = (char *)ptr + (bytes ? bytes : 1);
  for (rapi_vmm_extent *e = extent_from(v, ptr); st == RAP_OK && e != NULL && e->addr < end;
       e = e->next)
    if (!e->asleep) st = share_extent(v, e);
  rapi_unlock(&held);
  return st;
}

static const rapi_platform_export vmm_export = {"export=posix", vmm_export_state, vmm_locate};

/* ---- life cycle ------------------------------------------------------------------------------- */

int rapi_vmm_start(rap_allocator *self, void *state, rapi_vmm *v) {
  rapi_vmm saved = *v;   /* rapi_tracked_init frees v when it fails */
  v->self = self;
  v->resizable.granularity = v->granularity;
  v->resizable.resize = vmm_resize;
  v->resizable.suspend = rapi_vmm_suspend;
  v->resizable.resume = rapi_vmm_resume;
  v->resizable.hold = rapi_vmm_hold;
  v->resizable.piece = v->piece;
  v->resizable.unmap_inside = rapi_vmm_unmap_inside;
  v->resizable.map_inside = rapi_vmm_map_inside;
  v->resizable.unmapped_inside = rapi_vmm_unmapped_inside;
  v->resizable.pieces = rapi_vmm_pieces;
  int st = rapi_tracked_init(state, self, v, vmm_raw_alloc, vmm_raw_free, false, v->granularity);
  if (st != RAP_OK) {
    saved.ops->unreserve(&saved);
    return st;
  }
  self->resizable = &v->resizable;
  /* Host memory until the device backend says otherwise (vmm_device.c). */
  v->platform = (rapi_platform){.root = self, .memory = RAPI_MEMORY_HOST, .source = RAPI_SOURCE_VMM,
                                .device = -1, .vmm = v, .exporter = &vmm_export};
  self->platform = &v->platform;
  v->segments.walk = vmm_walk;
  v->segments.device = v->device;   /* HostVmm says -1 after this */
  self->segments = &v->segments;
  self->segments_ctx = v;
  if (RAPI_UNLIKELY(rapi_log_on(RAP_LOG_DEBUG))) {
    char range[32], gran[32];
    rapi_format_size(range, sizeof range, v->reserve);
    rapi_format_size(gran, sizeof gran, v->granularity);
    rap_log(RAP_LOG_DEBUG, "%s: reserved %s at %p, mapped in granules of %s",
            rap_allocator_name(self), range, (void *)v->base, gran);
  }
  return RAP_OK;
}

void rapi_vmm_fini(rap_allocator *self, void *state) {
  rapi_tracked *p = state;
  if (p->impl == NULL) return;
  rapi_vmm *v = p->impl;
  const rapi_vmm_backend *ops = v->ops;
  self->resizable = NULL;
  if (v->ipc != NULL) rapi_ipc_export_stop(v);
  /* Live allocations are unmapped by the tracked body's fini, which frees v: the range goes after,
   * from a copy. An extent that failed to unmap is left to the process's end. */
  while (v->first != NULL && unmap_extent(v, v->first) == RAP_OK) continue;
  rapi_vmm copy = *v;
  rapi_tracked_fini(self, state);
  if (copy.first == NULL) ops->unreserve(&copy);
}

int rapi_vmm_stats(void *state, rap_stats *out) {
  rapi_tracked *p = state;
  rapi_tracked_stats(state, out);
  pthread_mutex_lock(&p->lock);
  const rapi_vmm *v = p->impl;
  out->actual_bytes = v->mapped;        /* what is mapped, granules rounded up */
  out->actual_high_watermark = v->mapped_hwm;
  out->chunk_count = v->extents;
  out->maps = v->map_calls;             /* physical memory mapped, not the allocations served */
  out->unmaps = v->unmap_calls;
  out->backup_bytes = __atomic_load_n(&v->ring_bytes, __ATOMIC_RELAXED);   /* DeviceVmm's ring */
  pthread_mutex_unlock(&p->lock);
  return RAP_OK;
}

int rapi_vmm_reset_peaks(void *state) {
  rapi_tracked *p = state;
  rapi_tracked_reset_peaks(state);
  pthread_mutex_lock(&p->lock);
  rapi_vmm *v = p->impl;
  v->mapped_hwm = v->mapped;
  pthread_mutex_unlock(&p->lock);
  return RAP_OK;
}

int rapi_vmm_no_parent(rap_allocator *self) {
  if (self->parent == NULL) return RAP_OK;
  return rapi_fail(RAP_ERR_INVALID, "%s: %s maps its own memory and takes no parent ('%s' was given)",
                   rap_allocator_name(self), self->strategy->name, rap_allocator_name(self->parent));
}
