/* planned.c — Planned: serves a training iteration from a plan made from its trace.
 *
 * Planned(PARENT, plan=FILE) reads a plan (rap-trace plan, planned_load.c) and takes one arena of
 * the plan's size from PARENT at its first allocation. Requests are matched in order against the
 * plan's entries (requested bytes in the entry's range, the entry's stream bound to the request's
 * resource): a match whose cells are all unused is handed its place in the arena, with no search;
 * anything else goes to PARENT (usually a ResourceAwarePool): a request the plan did not foresee,
 * an entry with no place, or a place still in use because the program freed later than the trace.
 * After a miss the cursor looks a few entries ahead, and back to the iteration's first entry, to
 * fall into step again.
 * Stream safety: each cell keeps who freed it last (resource and batch, as the ResourceAwarePool
 * keeps for a pending block). A cell freed on r may go to r at once; to another resource only once
 * r passed that batch, or behind a wait queued on the taker (never a host block: a wait that would
 * block the host makes the request a miss). Invariant: a cell has at most one live entry, and a
 * live entry owns every cell it covers.
 */
#include "planned.h"
#include "events/batch_clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PL_MAX_RES 64   /* resources a plan serves; requests on more go to the parent */
/* Misses in a row after which the cursor is lost: it then waits for the iteration's first entry
 * and looks no further ahead (a program's set-up, before its first iteration, must not take places
 * of the plan for blocks that live on). It starts lost. */
#define PL_LOST 4

typedef struct pl_res {
  rap_resource *r;                /* NULL: the slot is unused */
  uintptr_t key;
  rapi_batch_clock clock;         /* the batches of the cells it frees */
  size_t live, current, hwm;      /* planned blocks it owns, their bytes */
} pl_res;

typedef struct pl_cell {
  int32_t owner;                  /* the live entry on it, or -1 */
  uint8_t r[2];                   /* resource slots + 1 whose frees it waits for (0: none) */
  uint64_t tag[2];                /* their batches */
} pl_cell;

typedef struct planned planned;
struct planned {
  rap_allocator *self, *parent;
  rapi_plan plan;
  pl_cell *cells;
  uint8_t *owner_of;              /* live entry -> its resource slot */
  uint64_t *uses;                 /* live entry -> other resource slots recorded on it */
  size_t *req;                    /* live entry -> requested bytes */
  uint8_t *bind;                  /* plan stream -> resource slot + 1 */
  char *arena;
  int arena_state;                /* 0 not taken yet, 1 held, -1 the parent refused it (asked
                                     again at the iteration's first entry) */
  uint64_t arena_refusals;        /* the parent's refusals of the arena so far */
  size_t pos, lookahead;
  unsigned missed;                /* misses in a row (PL_LOST and more: lost) */
  size_t confirm, confirmed;      /* matches in a row that end being lost; so far */
  pl_res res[PL_MAX_RES];
  pl_res *last;
  rapi_ptr_map live;              /* pointer -> entry * 4 + 1, or requested bytes * 4 + 2 */
  size_t current, hwm, count;
  uint64_t hits, expected, misses, lost, skipped, waits;
};

#define PL_ENTRY(i) ((void *)(uintptr_t)(((uintptr_t)(i) << 2) | 1))
#define PL_PARENT(n) ((void *)(uintptr_t)(((uintptr_t)(n) << 2) | 2))

static const char *nm(const planned *p) { return rap_allocator_name(p->self); }

/* ---- resources and their batches ---------------------------------------------------------- */

static RAPI_NOINLINE pl_res *res_slow(planned *p, rap_resource *r) {
  pl_res *free_slot = NULL;
  for (size_t i = 0; i < PL_MAX_RES; i++) {
    pl_res *rs = &p->res[i];
    if (rs->r != NULL && rs->key == r->key) return p->last = rs;
    if (rs->r == NULL && free_slot == NULL) free_slot = rs;
  }
  if (free_slot == NULL || rap_resource_watch(r, p->self) != RAP_OK) return NULL;
  memset(free_slot, 0, sizeof *free_slot);
  free_slot->r = r;
  free_slot->key = r->key;
  rapi_clock_init(&free_slot->clock, r);
  return p->last = free_slot;
}

static inline pl_res *res_of(planned *p, rap_resource *r) {
  if (RAPI_LIKELY(p->last != NULL && p->last->key == r->key)) return p->last;
  return res_slow(p, r);
}

static inline unsigned slot_of(const planned *p, const pl_res *rs) { return (unsigned)(rs - p->res) + 1; }
static inline bool passed(const pl_res *rs, uint64_t batch) { return rapi_clock_passed(&rs->clock, batch); }
static inline bool is_sync(const pl_res *rs) { return rs->clock.sync; }

/* One event on rs covering every cell freed in its open batch (none while rs captures a graph). */
static int fence_open(planned *p, pl_res *rs) {
  if (rs->clock.sync || !rs->clock.dirty) return RAP_OK;
  if (__atomic_load_n(&rs->r->capturing, __ATOMIC_RELAXED))
    return rapi_fail(RAP_ERR_BUSY, "%s: the resource is capturing a graph", nm(p));
  return rapi_clock_fence(&rs->clock, rs->r, p->self, 0);
}

static int query_fences(pl_res *rs) { return rapi_clock_query(&rs->clock, rs->r); }

/* Makes rs's later work wait until resource slot s has passed batch tag: RAP_OK when it has
 * passed or the wait is queued on rs; RAP_ERR_BUSY where only a host wait would do. */
static int wait_for(planned *p, pl_res *rs, unsigned s, uint64_t tag) {
  pl_res *o = &p->res[s - 1];
  int st = RAP_OK;
  if (tag == o->clock.open) st = fence_open(p, o);   /* nothing when nothing carries it */
  if (st == RAP_OK) st = query_fences(o);
  rapi_event *ev = NULL;
  if (st == RAP_OK) st = rapi_clock_event(&o->clock, tag, &ev);
  if (st != RAP_OK || ev == NULL) return st;
  st = rs->r->ops->wait(rs->r, ev);
  if (st == RAPI_HOST_WAIT) return RAP_ERR_BUSY;
  if (st == RAP_OK) {
    p->waits++;
    RAPI_TRACE("wait", p->self, rs->r, NULL, 0, ",\"on\":%llu,\"host\":false",
               (unsigned long long)o->r->id);
  }
  return st;
}

/* ---- cells ------------------------------------------------------------------------------------ */

/* 1: every cell of e is unused and free for slot me; 0: one is in use; -1: free, but some wait
 * for another resource's batch. */
static RAPI_INLINE int cells_ready(const planned *p, const rapi_plan_entry *e, unsigned me) {
  int r = 1;
  for (uint32_t c = e->c0; c < e->c1; c++) {
    const pl_cell *x = &p->cells[c];
    if (x->owner >= 0) return 0;
    for (int k = 0; k < 2; k++)
      if (x->r[k] != 0 && x->r[k] != me && !passed(&p->res[x->r[k] - 1], x->tag[k])) r = -1;
  }
  return r;
}

/* Queues on rs a wait for every other resource's batch the cells of e wait for (each resource
 * once, for its newest batch there). */
static int wait_cells(planned *p, const rapi_plan_entry *e, pl_res *rs) {
  uint64_t need[PL_MAX_RES], mask = 0;
  unsigned me = slot_of(p, rs);
  for (uint32_t c = e->c0; c < e->c1; c++) {
    const pl_cell *x = &p->cells[c];
    for (int k = 0; k < 2; k++) {
      unsigned s = x->r[k];
      if (s == 0 || s == me || passed(&p->res[s - 1], x->tag[k])) continue;
      uint64_t bit = (uint64_t)1 << (s - 1);
      if (!(mask & bit) || x->tag[k] > need[s - 1]) need[s - 1] = x->tag[k];
      mask |= bit;
    }
  }
  for (unsigned s = 1; mask != 0; s++, mask >>= 1) {
    if (!(mask & 1)) continue;
    int st = wait_for(p, rs, s, need[s - 1]);
    if (st != RAP_OK) return st;
  }
  return RAP_OK;
}

static RAPI_INLINE void claim(planned *p, const rapi_plan_entry *e, size_t i, pl_res *rs,
                              size_t bytes, void **out) {
  for (uint32_t c = e->c0; c < e->c1; c++) p->cells[c].owner = (int32_t)i;
  void *ptr = p->arena + e->off;
  rapi_map_insert(&p->live, ptr, PL_ENTRY(i));   /* room was made before */
  p->owner_of[i] = (uint8_t)(slot_of(p, rs) - 1);
  p->uses[i] = 0;
  p->req[i] = bytes;
  rs->live++;
  rs->current += bytes;
  if (rs->current > rs->hwm) rs->hwm = rs->current;
  p->current += bytes;
  if (p->current > p->hwm) p->hwm = p->current;
  p->count++;
  p->hits++;
  *out = ptr;
}

/* ---- allocate ---------------------------------------------------------------------------------- */

static void take_arena(planned *p) {
  void *a = NULL;
  int st = rap_allocate(p->parent, &a, (size_t)p->plan.arena, NULL);
  if (st != RAP_OK) {
    p->arena_state = -1;
    rap_log(p->arena_refusals++ == 0 ? RAP_LOG_WARN : RAP_LOG_DEBUG, "%s: the parent refused the "
            "plan's arena of %llu bytes (%s): requests go to the parent until the iteration's first "
            "entry asks again", nm(p), (unsigned long long)p->plan.arena, rap_last_error());
    return;
  }
  p->arena = a;
  p->arena_state = 1;
  RAPI_TRACE("grow", p->self, NULL, a, (size_t)p->plan.arena, ",\"held\":%llu",
             (unsigned long long)p->plan.arena);
}

static inline bool fits(const rapi_plan_entry *e, size_t bytes) { return bytes >= e->min && bytes <= e->max; }

/* Whether entry e is the request's: bytes in its range (for an entry whose size follows the data,
 * within four times it: the cursor keeps in step, and a request past its place goes to the
 * parent), its stream bound to rs (bound now if it was not yet). */
static bool matches(planned *p, const rapi_plan_entry *e, pl_res *rs, size_t bytes) {
  if (!fits(e, bytes) && !(e->min < e->max && bytes / 4 <= e->max && bytes >= e->min / 4)) return false;
  unsigned b = p->bind[e->stream];
  if (b == 0) p->bind[e->stream] = (uint8_t)slot_of(p, rs);
  return b == 0 || b == slot_of(p, rs);
}

static int from_parent(planned *p, void **out, size_t bytes, rap_resource *r) {
  void *ptr = NULL;
  int st = rap_allocate(p->parent, &ptr, bytes, r);
  if (st != RAP_OK) return st;
  rapi_map_insert(&p->live, ptr, PL_PARENT(bytes));
  p->current += bytes;
  if (p->current > p->hwm) p->hwm = p->current;
  p->count++;
  *out = ptr;
  return RAP_OK;
}

/* Entry i, matched: its place if every cell is free for rs (after queued waits), else the parent. */
static int serve(planned *p, size_t i, pl_res *rs, void **out, size_t bytes, rap_resource *r) {
  const rapi_plan_entry *e = &p->plan.e[i];
  p->pos = i + 1 == p->plan.n ? 0 : i + 1;
  if (e->off == RAPI_PLAN_NONE) {
    p->expected++;
    return from_parent(p, out, bytes, r);
  }
  if (!fits(e, bytes)) {
    p->misses++;
    RAPI_TRACE("miss", p->self, r, NULL, bytes, ",\"entry\":%zu", i);
    return from_parent(p, out, bytes, r);
  }
  if (i == 0 && p->arena_state < 0) p->arena_state = 0;   /* a refusal may have been passing */
  if (p->arena_state == 0) take_arena(p);
  int ready = p->arena != NULL ? cells_ready(p, e, slot_of(p, rs)) : 0;
  if (ready < 0 && wait_cells(p, e, rs) == RAP_OK) ready = 1;
  if (ready <= 0) {
    p->misses++;
    RAPI_TRACE("miss", p->self, r, NULL, bytes, ",\"entry\":%zu", i);
    return from_parent(p, out, bytes, r);
  }
  p->missed = 0;
  claim(p, e, i, rs, bytes, out);
  return RAP_OK;
}

/* Lost: requests go to the parent while the cursor follows them without serving (from the
 * iteration's first entry, or a little further on), until confirm of them in a row matched. */
static bool relock_match(const planned *p, const rapi_plan_entry *e, unsigned me, size_t bytes) {
  bool size_ok = fits(e, bytes) || (e->min < e->max && bytes / 4 <= e->max && bytes >= e->min / 4);
  return size_ok && (p->bind[e->stream] == 0 || p->bind[e->stream] == me);
}

static int relock(planned *p, pl_res *rs, void **out, size_t bytes, rap_resource *r) {
  size_t n = p->plan.n, i = SIZE_MAX;
  unsigned me = slot_of(p, rs);
  p->lost++;
  if (relock_match(p, &p->plan.e[p->pos], me, bytes)) {
    i = p->pos;
    p->confirmed++;
  } else {
    /* Once the plan has served, an iteration that drifted from it (a different number of
     * allocations: experts without tokens) is looked for further on; before, only at its start,
     * so that a program's set-up is not taken for it. */
    size_t w = p->hits > 0 ? 4 * p->lookahead : 0;
    for (size_t k = 1; k <= w && k < n && i == SIZE_MAX; k++)
      if (relock_match(p, &p->plan.e[(p->pos + k) % n], me, bytes)) i = (p->pos + k) % n;
    if (i == SIZE_MAX && relock_match(p, &p->plan.e[0], me, bytes)) i = 0;
    p->confirmed = 1;
  }
  if (i == SIZE_MAX) {
    if (p->hits == 0) p->pos = 0;
    p->confirmed = 0;
  } else {
    p->pos = i + 1 == n ? 0 : i + 1;
    if (p->confirmed >= p->confirm) p->missed = 0;
  }
  return from_parent(p, out, bytes, r);
}

/* Not the cursor's entry, or its place is not ready: a few entries on (while in step), or the
 * iteration's first entry (once lost), else the parent. */
static RAPI_NOINLINE int pl_allocate_slow(planned *p, pl_res *rs, void **out, size_t bytes,
                                          rap_resource *r) {
  int st = rapi_map_reserve(&p->live);
  if (st != RAP_OK) return rapi_fail(st, "%s: out of host memory for the live map", nm(p));
  if (rs != NULL && p->missed >= PL_LOST) return relock(p, rs, out, bytes, r);
  if (rs != NULL) {
    size_t n = p->plan.n;
    for (size_t k = 0; k <= p->lookahead && k < n; k++) {
      size_t i = (p->pos + k) % n;
      if (!matches(p, &p->plan.e[i], rs, bytes)) continue;
      p->skipped += k;
      return serve(p, i, rs, out, bytes, r);
    }
  }
  p->misses++;
  p->missed += p->missed < PL_LOST;
  RAPI_TRACE("miss", p->self, r, NULL, bytes, ",\"entry\":null");
  return from_parent(p, out, bytes, r);
}

/* The hit path: the cursor's entry matches and its cells are free for this resource. */
static RAPI_INLINE int pl_allocate_body(void *state, void **out, size_t bytes, rap_resource *r) {
  planned *p = state;
  pl_res *rs = res_of(p, r ? r : &rap_allocator_manager(p->self)->host);
  if (RAPI_LIKELY(rs != NULL && p->arena != NULL && p->missed < PL_LOST && rapi_map_has_room(&p->live))) {
    size_t i = p->pos;
    const rapi_plan_entry *e = &p->plan.e[i];
    if (bytes >= e->min && bytes <= e->max && e->off != RAPI_PLAN_NONE &&
        p->bind[e->stream] == slot_of(p, rs) && cells_ready(p, e, slot_of(p, rs)) == 1) {
      p->pos = i + 1 == p->plan.n ? 0 : i + 1;
      p->missed = 0;
      claim(p, e, i, rs, bytes, out);
      return RAP_OK;
    }
  }
  return pl_allocate_slow(p, rs, out, bytes, r);
}

RAPI_GUARDED_ENTRY(static int, pl_allocate, "rap_allocate", ((planned *)state)->self,
                   pl_allocate_body, (void *state, void **out, size_t bytes, rap_resource *r),
                   (state, out, bytes, r))

/* ---- deallocate --------------------------------------------------------------------------------- */

/* A use beyond the one a cell keeps: fenced and waited for on the host now (rare: a block
 * recorded on two other streams). */
static int wait_extra_use(planned *p, pl_res *u) {
  if (!u->r->call_scoped) (void)rapi_clock_stamp(&u->clock);   /* call-scoped: fenced at record */
  int st = fence_open(p, u);
  rapi_event *newest = st == RAP_OK ? rapi_clock_newest(&u->clock) : NULL;
  if (newest != NULL) st = rapi_host_wait(newest);
  if (st == RAP_OK) st = query_fences(u);
  return st;
}

/* The batch a use on u waits for, at the block's free: u's open one; on a call-scoped u, whose
 * stream may be gone now, the last one fenced, which covers every record of a use on it (pl_record). */
static uint64_t use_tag(pl_res *u) {
  return u->r->call_scoped ? u->clock.open - 1 : rapi_clock_stamp(&u->clock);
}

/* The batch a call-scoped owner's free waits for, its stream maybe gone once the call returns:
 * named, the open one, fenced now; not named (NULL: the owner's), no call with the owner, so its
 * stream is not touched: the last one fenced (as the ResourceAwarePool's free_pending). */
static RAPI_NOINLINE uint64_t scoped_tag(planned *p, pl_res *rs, bool named) {
  if (!named) return rs->clock.open - 1;
  uint64_t tag = rapi_clock_stamp(&rs->clock);
  if (fence_open(p, rs) != RAP_OK) {   /* the stream is still there: wait for it now */
    rap_log(RAP_LOG_WARN, "%s: fencing a call-scoped resource failed: %s", nm(p), rap_last_error());
    if (rs->r->ops->synchronize(rs->r) == RAP_OK) rapi_clock_pass_all(&rs->clock);
    else rap_log(RAP_LOG_WARN, "%s: synchronizing it failed too: %s", nm(p), rap_last_error());
  }
  return tag;
}

/* The cells of e are free again, waiting for slot me's batch tag (me 0: the host, nothing to wait
 * for) and for one use u1's. */
static RAPI_INLINE void release_cells(planned *p, const rapi_plan_entry *e, unsigned me, uint64_t tag,
                                      unsigned u1, uint64_t tag1) {
  for (uint32_t c = e->c0; c < e->c1; c++) {
    pl_cell *x = &p->cells[c];
    x->owner = -1;
    x->r[0] = (uint8_t)me;
    x->tag[0] = tag;
    x->r[1] = (uint8_t)u1;
    x->tag[1] = tag1;
  }
}

/* A planned block with uses, or freed naming a resource that is not its owner. */
static RAPI_NOINLINE int free_planned_slow(planned *p, void *ptr, size_t i, pl_res *rs, rap_resource *r) {
  if (r != NULL && r->key != rs->key)
    return rapi_fail(RAP_ERR_WRONG_RESOURCE, "rap_deallocate('%s'): %p belongs to %s resource #%llu, "
                     "not to %s resource #%llu", nm(p), ptr, rs->r->ops->kind,
                     (unsigned long long)rs->r->id, r->ops->kind, (unsigned long long)r->id);
  unsigned u1 = 0;
  for (uint64_t m = p->uses[i], s = 1; m != 0; m >>= 1, s++) {
    pl_res *u = &p->res[s - 1];
    if (!(m & 1) || is_sync(u)) continue;
    if (u1 != 0) {
      int st = wait_extra_use(p, u);
      if (st != RAP_OK) return st;
      continue;
    }
    u1 = (unsigned)s;
  }
  uint64_t tag1 = u1 ? use_tag(&p->res[u1 - 1]) : 0;
  uint64_t tag = RAPI_UNLIKELY(rs->r->call_scoped) ? scoped_tag(p, rs, r != NULL)
                                                   : rapi_clock_stamp(&rs->clock);
  release_cells(p, &p->plan.e[i], is_sync(rs) ? 0 : slot_of(p, rs), tag, u1, tag1);
  return RAP_OK;
}

static RAPI_INLINE int pl_deallocate_body(void *state, void *ptr, rap_resource *r) {
  planned *p = state;
  uintptr_t v = (uintptr_t)rapi_map_find(&p->live, ptr);
  if (RAPI_UNLIKELY(v == 0))
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_deallocate('%s'): %p is not a live block of it "
                     "(double free, or another allocator's?)", nm(p), ptr);
  size_t bytes;
  if (v & 1) {
    size_t i = v >> 2;
    pl_res *rs = &p->res[p->owner_of[i]];
    if (RAPI_UNLIKELY(p->uses[i] != 0 || (r != NULL && r->key != rs->key))) {
      int st = free_planned_slow(p, ptr, i, rs, r);
      if (st != RAP_OK) return st;
    } else {
      uint64_t tag = RAPI_UNLIKELY(rs->r->call_scoped) ? scoped_tag(p, rs, r != NULL)
                                                       : rapi_clock_stamp(&rs->clock);
      release_cells(p, &p->plan.e[i], is_sync(rs) ? 0 : slot_of(p, rs), tag, 0, 0);
    }
    bytes = p->req[i];
    rs->live--;
    rs->current -= bytes;
  } else {
    int st = rap_deallocate(p->parent, ptr, r);
    if (st != RAP_OK) return st;
    bytes = v >> 2;
  }
  rapi_map_remove(&p->live, ptr);
  p->current -= bytes;
  p->count--;
  return RAP_OK;
}

RAPI_GUARDED_ENTRY(static int, pl_deallocate, "rap_deallocate", ((planned *)state)->self,
                   pl_deallocate_body, (void *state, void *ptr, rap_resource *r), (state, ptr, r))

/* ---- the rest of the table ------------------------------------------------------------------- */

static void pl_free_arrays(planned *p) {
  free(p->cells);
  free(p->owner_of);
  free(p->uses);
  free(p->req);
  free(p->bind);
  rapi_plan_free(&p->plan);
  if (p->live.slots != NULL) rapi_map_fini(&p->live);
}

static int pl_init(rap_allocator *self, void *state, rap_options *opts) {
  planned *p = state;
  p->self = self;
  p->parent = rap_allocator_parent(self);
  const char *path = NULL, *domain = NULL;
  uint64_t lookahead = 16, confirm = 4;
  int st = rap_options_get_string(opts, "plan", &path);
  if (st == RAP_OK) st = rap_options_get_string(opts, "domain", &domain);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "lookahead", &lookahead);
  if (st == RAP_OK) st = rap_options_get_uint(opts, "confirm", &confirm);
  if (st != RAP_OK) return st;
  if (path == NULL || *path == '\0')
    return rapi_fail(RAP_ERR_INVALID, "Planned('%s'): plan=FILE is required (a plan written by "
                     "rap-trace plan)", nm(p));
  if (confirm == 0 || confirm > 4096)
    return rapi_fail(RAP_ERR_INVALID, "Planned('%s'): confirm=%llu is not 1 to 4096 entries", nm(p),
                     (unsigned long long)confirm);
  if (lookahead > 4096)
    return rapi_fail(RAP_ERR_INVALID, "Planned('%s'): lookahead=%llu is more than 4096 entries", nm(p),
                     (unsigned long long)lookahead);
  p->lookahead = (size_t)lookahead;
  p->missed = PL_LOST;
  char who[RAPI_NAME_MAX + 16];
  snprintf(who, sizeof who, "Planned('%s')", nm(p));
  if ((st = rapi_plan_load(path, domain, who, &p->plan)) != RAP_OK) return st;
  size_t n = p->plan.n;
  p->cells = rapi_malloc((p->plan.ncells + 1) * sizeof *p->cells);
  p->owner_of = rapi_calloc(n, sizeof *p->owner_of);
  p->uses = rapi_calloc(n, sizeof *p->uses);
  p->req = rapi_calloc(n, sizeof *p->req);
  p->bind = rapi_calloc(p->plan.streams + 1, sizeof *p->bind);
  if (p->cells == NULL || p->owner_of == NULL || p->uses == NULL || p->req == NULL || p->bind == NULL ||
      rapi_map_init(&p->live) != RAP_OK) {
    pl_free_arrays(p);
    memset(p, 0, sizeof *p);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a plan of %zu entries", who, n);
  }
  for (size_t c = 0; c < p->plan.ncells; c++) p->cells[c] = (pl_cell){-1, {0, 0}, {0, 0}};
  p->confirm = n / 4 < 1 ? 1 : n / 4 > confirm ? (size_t)confirm : n / 4;
  /* Places are aligned to the plan's granule inside an arena aligned as the parent aligns. */
  size_t pa = rap_allocator_alignment(p->parent);
  rap_allocator_set_alignment(self, pa < p->plan.alignment ? pa : (size_t)p->plan.alignment);
  return RAP_OK;
}

/* Every resource that freed cells has passed its last batch (waited for on the host). */
static int wait_all_batches(planned *p) {
  int first = RAP_OK;
  for (size_t s = 0; s < PL_MAX_RES; s++) {
    pl_res *rs = &p->res[s];
    if (rs->r == NULL || is_sync(rs)) continue;
    int st = fence_open(p, rs);
    if (st == RAP_OK && rapi_clock_newest(&rs->clock) != NULL && rs->r != rapi_current_queue)
      st = rapi_host_wait(rapi_clock_newest(&rs->clock));
    if (st == RAP_OK) st = query_fences(rs);
    if (st != RAP_OK && first == RAP_OK) first = st;
  }
  return first;
}

static void pl_fini(rap_allocator *self, void *state) {
  planned *p = state;
  if (p->arena != NULL && wait_all_batches(p) != RAP_OK)
    rap_log(RAP_LOG_WARN, "%s: waiting for the arena's last users at teardown failed: %s",
            rap_allocator_name(self), rap_last_error());
  if (p->hits + p->misses + p->expected > 0)
    rap_log(RAP_LOG_INFO, "%s: %llu allocations from the plan, %llu from the parent as planned, "
            "%llu misses, %llu while finding the iteration, %llu entries skipped, %llu waits",
            rap_allocator_name(self), (unsigned long long)p->hits, (unsigned long long)p->expected,
            (unsigned long long)p->misses, (unsigned long long)p->lost, (unsigned long long)p->skipped,
            (unsigned long long)p->waits);
  for (size_t s = 0; s < PL_MAX_RES; s++) {
    pl_res *rs = &p->res[s];
    if (rs->r == NULL) continue;
    rapi_clock_fini(&rs->clock, rs->r);
    rap_resource_unwatch(rs->r, self);
  }
  if (p->arena != NULL) (void)rap_deallocate(p->parent, p->arena, NULL);
  pl_free_arrays(p);
}

static int pl_stats(void *state, rap_stats *out) {
  planned *p = state;
  rap_stats ps;
  int st = rap_allocator_stats(p->parent, &ps);
  if (st != RAP_OK) return st;
  *out = ps;
  out->current_bytes = p->current;
  out->high_watermark = p->hwm;
  out->allocation_count = p->count;
  return RAP_OK;
}

static int pl_reset_peaks(void *state) {
  planned *p = state;
  p->hwm = p->current;
  for (size_t s = 0; s < PL_MAX_RES; s++) p->res[s].hwm = p->res[s].current;
  int st = rap_allocator_reset_peaks(p->parent);
  return st == RAP_ERR_UNSUPPORTED ? RAP_OK : st;
}

static int pl_owns(void *state, const void *ptr) {
  return rapi_map_contains_shared(&((planned *)state)->live, ptr);
}

static size_t planned_live(const planned *p) {
  size_t n = 0;
  for (size_t s = 0; s < PL_MAX_RES; s++) n += p->res[s].live;
  return n;
}

/* The arena goes back when no planned block lives and every batch that freed cells has passed. */
static int pl_release_body(void *state) {
  planned *p = state;
  if (p->arena != NULL && planned_live(p) == 0) {
    bool all = true;
    for (size_t s = 0; s < PL_MAX_RES; s++) {
      pl_res *rs = &p->res[s];
      if (rs->r == NULL || is_sync(rs)) continue;
      int st = fence_open(p, rs);
      if (st == RAP_OK) st = query_fences(rs);
      all &= st == RAP_OK && rapi_clock_newest(&rs->clock) == NULL;
    }
    if (all) {
      int st = rap_deallocate(p->parent, p->arena, NULL);
      if (st != RAP_OK) return st;
      RAPI_TRACE("release", p->self, NULL, p->arena, (size_t)p->plan.arena, ",\"held\":0");
      p->arena = NULL;
      p->arena_state = 0;
      for (size_t c = 0; c < p->plan.ncells; c++) p->cells[c] = (pl_cell){-1, {0, 0}, {0, 0}};
    }
  }
  return rap_release(p->parent);
}

static int pl_release(void *state) {
  int st;
  RAPI_GUARDED(st, ((planned *)state)->self, "rap_release", pl_release_body(state));
  return st;
}

/* Every owned cell's entry is live at its place and covers it; every live entry owns its cells. */
static RAPI_INLINE int pl_check_body(void *state) {
  planned *p = state;
  size_t owned = 0, want = 0, live = 0;
  for (size_t c = 0; c < p->plan.ncells; c++) {
    int32_t o = p->cells[c].owner;
    if (o < 0) continue;
    owned++;
    const rapi_plan_entry *e = &p->plan.e[o];
    if (p->arena == NULL || (uintptr_t)rapi_map_find(&p->live, p->arena + e->off) != (uintptr_t)PL_ENTRY(o) ||
        c < e->c0 || c >= e->c1)
      return rapi_fail(RAP_ERR_CORRUPT, "%s: cell %zu is owned by entry %d, which is not live there",
                       nm(p), c, (int)o);
  }
  void *tagged;
  for (size_t k = 0; (tagged = rapi_map_next(&p->live, &k)) != NULL;) {
    uintptr_t v = (uintptr_t)tagged;
    if (!(v & 1)) continue;
    const rapi_plan_entry *e = &p->plan.e[v >> 2];
    want += e->c1 - e->c0;
    live++;
  }
  if (owned != want || live != planned_live(p))
    return rapi_fail(RAP_ERR_CORRUPT, "%s: %zu cells owned, %zu covered by %zu live planned blocks "
                     "(%zu counted)", nm(p), owned, want, live, planned_live(p));
  return rap_allocator_check(p->parent);
}

static int pl_check(void *state) {
  int st;
  RAPI_GUARDED(st, ((planned *)state)->self, "rap_allocator_check", pl_check_body(state));
  return st;
}

static int pl_record_body(void *state, void *ptr, rap_resource *r) {
  planned *p = state;
  uintptr_t v = (uintptr_t)rapi_map_find(&p->live, ptr);
  if (v == 0)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_record_resource('%s'): %p is not a live block of it",
                     nm(p), ptr);
  if (!(v & 1)) return rap_record_resource(p->parent, ptr, r);
  pl_res *rs = res_of(p, r);
  if (rs == NULL)
    return rapi_fail(RAP_ERR_NOMEM, "rap_record_resource('%s'): it serves at most %d resources, or "
                     "host memory ran out", nm(p), PL_MAX_RES);
  size_t i = v >> 2;
  if (is_sync(rs) || rs == &p->res[p->owner_of[i]]) return RAP_OK;
  if (rs->r->call_scoped) {   /* fenced now: its stream may be gone by the block's free (use_tag) */
    (void)rapi_clock_stamp(&rs->clock);
    int st = fence_open(p, rs);
    if (st != RAP_OK) return st;
  }
  p->uses[i] |= (uint64_t)1 << (slot_of(p, rs) - 1);
  return RAP_OK;
}

static int pl_record(void *state, void *ptr, rap_resource *r) {
  int st;
  RAPI_GUARDED(st, ((planned *)state)->self, "rap_record_resource", pl_record_body(state, ptr, r));
  return st;
}

static int pl_pointer_resource(void *state, const void *ptr, rap_resource **out) {
  planned *p = state;
  uintptr_t v = ptr ? (uintptr_t)rapi_map_find(&p->live, ptr) : 0;
  if (v == 0)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource('%s'): %p is not a live block",
                     nm(p), ptr);
  if (!(v & 1)) return rap_pointer_resource(p->parent, ptr, out);
  *out = p->res[p->owner_of[v >> 2]].r;
  return RAP_OK;
}

static int pl_resource_stats(void *state, rap_resource *r, rap_stats *out) {
  planned *p = state;
  int st = rap_allocator_resource_stats(p->parent, r, out);
  if (st == RAP_ERR_UNSUPPORTED) {
    memset(out, 0, sizeof *out);
    st = RAP_OK;
  }
  for (size_t s = 0; s < PL_MAX_RES && st == RAP_OK; s++) {
    if (p->res[s].r == NULL || p->res[s].key != r->key) continue;
    out->current_bytes += p->res[s].current;
    out->high_watermark += p->res[s].hwm;
  }
  return st;
}

/* r is being destroyed: refused while it owns planned blocks; then (synchronized) every batch of
 * it has passed, and every trace of it goes. */
static int pl_resource_gone(void *state, rap_resource *r, int commit) {
  planned *p = state;
  pl_res *rs = NULL;
  for (size_t s = 0; s < PL_MAX_RES && rs == NULL; s++)
    if (p->res[s].r == r) rs = &p->res[s];
  if (rs == NULL) return RAP_OK;
  if (!commit)
    return rs->live == 0 ? RAP_OK
                         : rapi_fail(RAP_ERR_BUSY, "rap_resource_destroy: the resource still owns %zu "
                                     "planned block%s of '%s'", rs->live, rs->live == 1 ? "" : "s", nm(p));
  unsigned me = slot_of(p, rs);
  for (size_t c = 0; c < p->plan.ncells; c++)
    for (int k = 0; k < 2; k++)
      if (p->cells[c].r[k] == me) p->cells[c].r[k] = 0;
  for (size_t s = 0; s < p->plan.streams; s++)
    if (p->bind[s] == me) p->bind[s] = 0;
  for (size_t i = 0; i < p->plan.n; i++) p->uses[i] &= ~((uint64_t)1 << (me - 1));
  rapi_clock_fini(&rs->clock, rs->r);
  memset(rs, 0, sizeof *rs);
  p->last = NULL;
  return RAP_OK;
}

const rap_strategy rapi_planned_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "Planned",
    .flags = RAP_STRATEGY_NEEDS_PARENT | RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(planned),
    .init = pl_init,
    .fini = pl_fini,
    .allocate = pl_allocate,
    .deallocate = pl_deallocate,
    .stats = pl_stats,
    .owns = pl_owns,
    .release = pl_release,
    .check = pl_check,
    .record_resource = pl_record,
    .pointer_resource = pl_pointer_resource,
    .resource_stats = pl_resource_stats,
    .resource_gone = pl_resource_gone,
    .reset_peaks = pl_reset_peaks,
};
