/* model.h — a reference model of design.md §3, written apart from the library and for clarity only.
 *
 * It knows what a pool is ALLOWED to do, not which address it will pick: live blocks (pointer,
 * bytes, owner, recorded uses), and "hazards": byte ranges deallocated on a queue (or recorded on
 * one) whose queued work may still touch them. Resource 0 is the synchronous host; 1..FZ_QUEUES
 * are host_async queues whose progress the driver controls with gates:
 *   busy(q)   q has a closed gate, or a queued wait on a busy queue;
 *   passed(q, t)  everything queued on q before op t has run: q is idle now, or was idle after t,
 *                 or every closed gate and every wait not yet completed on q was queued after t
 *                 (q runs in order). deps are waits on events a closed gate or a busy queue holds
 *                 (the driver lets an event held by nothing complete before it says).
 * A hazard of op t on queues E passes when every q in E has passed t. A pool may hand a range to
 * resource x only when every hazard over it has passed or is x's own (cross_resource=wait: x
 * queues a wait instead; the host blocks). Pending bytes in a pool are at least the bytes of the
 * hazards that have not passed.
 * Lifecycle (docs/errors.md, "Lifetimes, threads and callbacks"): destroying queue q synchronizes it (q and what it waits
 * for pass); it is refused (RAP_ERR_BUSY, nothing changes) exactly while q owns a live block of a
 * resource-aware pool. Otherwise q's uses are dropped, its hazards lose q (a block pending on q
 * and on a busy use stays a hazard of that use: its owner is FZ_DEAD) and the slot gets a fresh
 * queue. Destroying the allocator chain resets the blocks; the queues live on.
 * ThreadCache over the pool (tc_max > 0): a request of 1 to tc_max bytes is counted, from the
 * ThreadCache down, as its size class (m_tc_class); a block's extent in the pool is what is counted. A
 * block freed into the cache stays live in the pool: its hazard is marked `cached` by the driver
 * (which sees the pool hold it), and is not pending there until the cache gives it back.
 */
#ifndef RAP_FUZZ_MODEL_H
#define RAP_FUZZ_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { FZ_QUEUES = 3, FZ_RES = FZ_QUEUES + 1, FZ_SLOTS = 64, FZ_HAZARDS = 512, FZ_DEAD = -2 };

typedef struct m_block {
  bool live;
  uintptr_t p;
  size_t n;
  int owner;          /* 0 host, 1..FZ_QUEUES */
  unsigned uses;      /* bit q: recorded on queue q (never the owner, never the host) */
  unsigned seed;      /* the fill pattern */
  size_t cnt;         /* the bytes the pool counts for it: n, or its ThreadCache class */
} m_block;

typedef struct m_hazard {
  uintptr_t lo, hi;   /* [lo, hi) */
  int owner;          /* the resource it is pending on (0: the host, with uses; FZ_DEAD: destroyed) */
  unsigned ents;      /* bit q: queues that must pass t */
  bool whole;         /* it has uses: a reuse takes the whole block */
  uint64_t t;         /* the op that deallocated it */
  bool cached;        /* set by the driver: a ThreadCache holds a block at lo (live in the pool) */
} m_hazard;

typedef struct m_queue {
  int gates;          /* closed gates queued */
  unsigned deps;      /* bit q: queued waits on events of queue q that have not completed */
  unsigned queued;    /* bit q: waits on q's events queued since this queue was last idle (they may
                         not have run, even once q passed: a report figure) */
  uint64_t busy_since;
  uint64_t gate_since;       /* the op at which the oldest closed gate was queued (gates > 0) */
  uint64_t waited[FZ_RES];   /* bit q of deps: the op at which the latest such wait was queued */
  uint64_t dep_since[FZ_RES];   /* bit q of deps: the op at which the oldest such wait was queued */
} m_queue;

typedef struct model {
  bool resource_aware, cross_wait;
  size_t align;       /* the pool's alignment: a block's extent is the request rounded up to it */
  m_block slot[FZ_SLOTS];
  m_hazard hz[FZ_HAZARDS];
  int nhz;
  m_queue q[FZ_RES];  /* index 0 unused: the host is never busy */
  uint64_t now;       /* op counter */
  size_t current, count;
  size_t counted;     /* the sum of the live blocks' cnt: current, rounded by a ThreadCache */
  size_t tc_max;      /* a ThreadCache over the pool caches requests of 1 to tc_max bytes; 0: none */
  bool orphans;       /* a destroyed queue left hazards: the pool may count them on no resource */
} model;

void m_init(model *m, bool resource_aware, bool cross_wait, size_t align);
/* A new allocator chain: no blocks, no hazards; the queues and the op counter carry on. */
void m_reset_pool(model *m, bool resource_aware, bool cross_wait, size_t align);
static inline bool m_busy(const model *m, int q) { return q > 0 && (m->q[q].gates > 0 || m->q[q].deps != 0); }
bool m_passed(const model *m, int q, uint64_t t);
bool m_hazard_passed(const model *m, const m_hazard *h);

/* Blocks. cnt: the bytes the pool counts (n, or the ThreadCache's class). */
void m_allocated(model *m, int slot, uintptr_t p, size_t n, size_t cnt, int owner, unsigned seed);
void m_record(model *m, int slot, int r);
void m_deallocated(model *m, int slot);
int  m_find_live(const model *m, uintptr_t p);       /* the slot whose block starts at p, or -1 */
int  m_overlapping_live(const model *m, uintptr_t lo, uintptr_t hi);   /* a live slot, or -1 */

/* The rule of §3.1 for a range [lo, hi) handed to resource x. `blocked`: the host blocked in the
 * call, so every queue passed. Returns 0 if allowed; otherwise -1 with a sentence in why. In
 * cross-wait mode, *waits gets the queues x must now wait for (the host cannot: -1); under a
 * ThreadCache, a wait on q that x queued after the hazard and has not finished also counts (a
 * refill handed the cache that block with the wait; the user gets it later, from the cache). */
int  m_check_handout(const model *m, int x, uintptr_t lo, uintptr_t hi, bool blocked, unsigned *waits,
                     char *why, size_t cap);
/* The range a pool handed out stops being pending: the block's extent, or whole hazards with uses. */
void m_consume(model *m, uintptr_t p, size_t cnt);
size_t m_extent(const model *m, size_t cnt);            /* cnt rounded up to the pool's alignment */

/* ThreadCache. Its classes in units of the alignment: 1, 2, 3, 4, then four per power of two
 * (5, 6, 7, 8, 10, 12, 14, 16, 20, ...). The class of n >= 1 bytes, in bytes. */
size_t m_tc_class(size_t align, size_t n);
/* The bytes the pool counts for a request of n: its class when the ThreadCache caches it, else n. */
size_t m_tc_count(const model *m, size_t n);

/* Queues. */
void m_busy_gate(model *m, int q);
void m_add_deps(model *m, int q, unsigned deps);
unsigned m_pass_closure(const model *m, int q);        /* q, what it waits for, what waits for it */
void m_passed_set(model *m, unsigned set);            /* every queue in set ran everything */
size_t m_unpassed_bytes(const model *m, int owner);    /* owner -1: all; cached hazards left out */
void m_drop_hazards(model *m);                         /* the pool has nothing pending */
unsigned m_fwd_closure(const model *m, int q);         /* q and what it waits for, transitively */

/* Lifecycle. */
bool m_owns_live(const model *m, int q);               /* q owns a live block (resource-aware) */
void m_queue_destroyed(model *m, int q);               /* q passed and is gone; the slot is fresh */
void m_dump(const model *m, FILE *out);                /* queues, live blocks, hazards (RAP_FUZZ_TRACE) */

#endif /* RAP_FUZZ_MODEL_H */
