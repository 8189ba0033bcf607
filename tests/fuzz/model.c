/* model.c — the reference model of design.md §3 (see model.h). Small and slow on purpose: arrays,
 * linear scans, no cleverness, so that it is obviously right.
 */
#include "model.h"

#include <stdio.h>
#include <string.h>

void m_init(model *m, bool resource_aware, bool cross_wait, size_t align) {
  memset(m, 0, sizeof *m);
  m->resource_aware = resource_aware;
  m->cross_wait = cross_wait;
  m->align = align;
  m->now = 1;
}

void m_reset_pool(model *m, bool resource_aware, bool cross_wait, size_t align) {
  memset(m->slot, 0, sizeof m->slot);
  m->nhz = 0;
  m->current = m->count = m->counted = 0;
  m->orphans = false;
  m->resource_aware = resource_aware;
  m->cross_wait = cross_wait;
  m->align = align;
}

bool m_passed(const model *m, int q, uint64_t t) {
  if (q == 0 || !m_busy(m, q)) return true;
  if (t < m->q[q].busy_since) return true;   /* deallocated while q was idle: nothing of q can touch it */
  /* q runs its work in order: when its closed gates and the waits it queued that have not completed
   * were all queued after t, what it had queued before t has run (a wait on a busy queue, then a
   * gate: the wait completes when that queue passes, while the later gate still holds q busy; a
   * wait queued behind that gate holds nothing queued before it). */
  if (m->q[q].gates > 0 && t >= m->q[q].gate_since) return false;
  for (int r = 1; r <= FZ_QUEUES; r++)
    if ((m->q[q].deps >> r & 1u) && t >= m->q[q].dep_since[r]) return false;
  return true;
}

bool m_hazard_passed(const model *m, const m_hazard *h) {
  for (int q = 1; q <= FZ_QUEUES; q++)
    if ((h->ents >> q & 1u) && !m_passed(m, q, h->t)) return false;
  return true;
}

size_t m_extent(const model *m, size_t n) {
  size_t a = m->align ? m->align : 1;
  if (n == 0) n = 1;
  return (n + a - 1) / a * a;
}

/* ---- ThreadCache classes ----------------------------------------------------------------------- */

size_t m_tc_class(size_t align, size_t n) {
  size_t u = (n + align - 1) / align;   /* units */
  if (u <= 4) return (u ? u : 1) * align;
  size_t p = 4;                         /* the power of two with p < u <= 2p */
  while (p * 2 < u) p *= 2;
  size_t c = p;
  while (c < u) c += p / 4;             /* four classes between p and 2p */
  return c * align;
}

size_t m_tc_count(const model *m, size_t n) {
  if (m->tc_max == 0 || n == 0 || n > m->tc_max) return n;
  return m_tc_class(m->align ? m->align : 1, n);
}

/* ---- blocks ----------------------------------------------------------------------------------- */

void m_allocated(model *m, int slot, uintptr_t p, size_t n, size_t cnt, int owner, unsigned seed) {
  m_block *b = &m->slot[slot];
  b->live = true;
  b->p = p;
  b->n = n;
  b->cnt = cnt;
  b->owner = owner;
  b->uses = 0;
  b->seed = seed;
  m->current += n;
  m->counted += cnt;
  m->count++;
}

void m_record(model *m, int slot, int r) {
  m_block *b = &m->slot[slot];
  if (m->resource_aware && r > 0 && r != b->owner) b->uses |= 1u << r;
}

static void add_hazard(model *m, m_hazard h) {
  if (m->nhz == FZ_HAZARDS) {   /* forget the ones that passed; if none did, stop tracking one */
    int k = 0;
    for (int i = 0; i < m->nhz; i++)
      if (!m_hazard_passed(m, &m->hz[i])) m->hz[k++] = m->hz[i];
    m->nhz = k;
    if (m->nhz == FZ_HAZARDS) return;
  }
  m->hz[m->nhz++] = h;
}

void m_deallocated(model *m, int slot) {
  m_block *b = &m->slot[slot];
  m->current -= b->n;
  m->counted -= b->cnt;
  m->count--;
  b->live = false;
  if (!m->resource_aware) return;   /* QuickPool, DynamicPoolList: free at once */
  unsigned ents = b->uses | (b->owner > 0 ? 1u << b->owner : 0u);
  if (ents == 0) return;            /* the host's own blocks are free at once */
  m_hazard h = {b->p, b->p + m_extent(m, b->cnt), b->owner, ents, b->uses != 0, m->now, false};
  add_hazard(m, h);
}

int m_find_live(const model *m, uintptr_t p) {
  for (int i = 0; i < FZ_SLOTS; i++)
    if (m->slot[i].live && m->slot[i].p == p) return i;
  return -1;
}

int m_overlapping_live(const model *m, uintptr_t lo, uintptr_t hi) {
  for (int i = 0; i < FZ_SLOTS; i++) {
    const m_block *b = &m->slot[i];
    if (b->live && lo < b->p + (b->cnt ? b->cnt : 1) && b->p < hi) return i;
  }
  return -1;
}

/* ---- the hand-out rule ---------------------------------------------------------------------- */

int m_check_handout(const model *m, int x, uintptr_t lo, uintptr_t hi, bool blocked, unsigned *waits,
                    char *why, size_t cap) {
  *waits = 0;
  if (blocked) return 0;   /* the host waited: every queue ran everything */
  for (int i = 0; i < m->nhz; i++) {
    const m_hazard *h = &m->hz[i];
    if (!(lo < h->hi && h->lo < hi)) continue;
    for (int q = 1; q <= FZ_QUEUES; q++) {
      if (!(h->ents >> q & 1u) || q == x || m_passed(m, q, h->t)) continue;
      if (m->cross_wait && x != 0 && m->tc_max > 0 && (m->q[x].deps >> q & 1u) && m->q[x].waited[q] > h->t)
        continue;   /* x waits for q since after the hazard: the cache's refill queued it */
      if (m->cross_wait && x != 0) {
        *waits |= 1u << q;   /* allowed if x now waits for q */
        continue;
      }
      snprintf(why, cap, "[%#lx, %#lx) handed to resource %d while pending on queue %d "
               "(deallocated at op %llu, queue busy since op %llu)", (unsigned long)lo,
               (unsigned long)hi, x, q, (unsigned long long)h->t,
               (unsigned long long)m->q[q].busy_since);
      return -1;
    }
  }
  return 0;
}

void m_consume(model *m, uintptr_t p, size_t cnt) {
  uintptr_t lo = p, hi = p + m_extent(m, cnt);
  m_hazard keep[FZ_HAZARDS + 2];
  int k = 0;
  for (int i = 0; i < m->nhz; i++) {
    m_hazard h = m->hz[i];
    if (!(lo < h.hi && h.lo < hi) || h.whole) {
      if (!(lo < h.hi && h.lo < hi)) keep[k++] = h;
      continue;
    }
    if (h.lo < lo) {
      m_hazard a = h;
      a.hi = lo;
      keep[k++] = a;
    }
    if (hi < h.hi) {
      m_hazard b = h;
      b.lo = hi;
      keep[k++] = b;
    }
  }
  if (k > FZ_HAZARDS) k = FZ_HAZARDS;   /* forget the newest pieces: checks only get weaker */
  memcpy(m->hz, keep, (size_t)k * sizeof keep[0]);
  m->nhz = k;
}

/* ---- queues ----------------------------------------------------------------------------------- */

void m_busy_gate(model *m, int q) {
  if (!m_busy(m, q)) m->q[q].busy_since = m->now;
  if (m->q[q].gates == 0) m->q[q].gate_since = m->now;
  m->q[q].gates++;
}

void m_add_deps(model *m, int q, unsigned deps) {
  m->q[q].queued |= deps;
  if (deps == 0) return;
  if (!m_busy(m, q)) m->q[q].busy_since = m->now;
  for (int r = 1; r <= FZ_QUEUES; r++)
    if (deps >> r & 1u) {
      if (!(m->q[q].deps >> r & 1u)) m->q[q].dep_since[r] = m->now;
      m->q[q].waited[r] = m->now;
    }
  m->q[q].deps |= deps;
}

unsigned m_pass_closure(const model *m, int q) {
  unsigned set = 1u << q, before;
  do {
    before = set;
    for (int r = 1; r <= FZ_QUEUES; r++) {
      if (set >> r & 1u) set |= m->q[r].deps;
      if (m->q[r].deps & set) set |= 1u << r;
    }
  } while (set != before);
  return set;
}

void m_passed_set(model *m, unsigned set) {
  for (int r = 1; r <= FZ_QUEUES; r++) {
    if (set >> r & 1u) {
      m->q[r].gates = 0;
      m->q[r].deps = 0;
    } else {
      m->q[r].deps &= ~set;
    }
    if (!m_busy(m, r)) m->q[r].queued = 0;
  }
}

size_t m_unpassed_bytes(const model *m, int owner) {
  size_t sum = 0;
  for (int i = 0; i < m->nhz; i++) {
    const m_hazard *h = &m->hz[i];
    if ((owner < 0 || h->owner == owner) && !h->cached && !m_hazard_passed(m, h)) sum += h->hi - h->lo;
  }
  return sum;
}

void m_dump(const model *m, FILE *out) {
  for (int q = 1; q <= FZ_QUEUES; q++)
    fprintf(out, "  queue %d: %d gates, waits for %#x, busy since op %llu%s\n", q, m->q[q].gates,
            m->q[q].deps, (unsigned long long)m->q[q].busy_since, m_busy(m, q) ? "" : " (idle)");
  for (int i = 0; i < FZ_SLOTS; i++)
    if (m->slot[i].live)
      fprintf(out, "  slot %d: %#lx, %zu bytes (%zu counted), owner %d, uses %#x\n", i,
              (unsigned long)m->slot[i].p, m->slot[i].n, m->slot[i].cnt, m->slot[i].owner, m->slot[i].uses);
  for (int i = 0; i < m->nhz; i++)
    fprintf(out, "  hazard [%#lx, %#lx) owner %d, queues %#x, op %llu%s%s\n", (unsigned long)m->hz[i].lo,
            (unsigned long)m->hz[i].hi, m->hz[i].owner, m->hz[i].ents, (unsigned long long)m->hz[i].t,
            m_hazard_passed(m, &m->hz[i]) ? " (passed)" : "", m->hz[i].cached ? " (cached)" : "");
}

void m_drop_hazards(model *m) {
  m->nhz = 0;
  m->orphans = false;
}

unsigned m_fwd_closure(const model *m, int q) {
  unsigned set = 1u << q, before;
  do {
    before = set;
    for (int r = 1; r <= FZ_QUEUES; r++)
      if (set >> r & 1u) set |= m->q[r].deps;
  } while (set != before);
  return set;
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

bool m_owns_live(const model *m, int q) {
  if (!m->resource_aware) return false;   /* other pools hand every block to the host */
  for (int i = 0; i < FZ_SLOTS; i++)
    if (m->slot[i].live && m->slot[i].owner == q) return true;
  return false;
}

/* The caller has passed q (m_passed_set). Uses on q are dropped (contract item 2); a hazard keeps
 * the queues it still waits for, and one pending on q belongs to no resource any more. */
void m_queue_destroyed(model *m, int q) {
  for (int i = 0; i < FZ_SLOTS; i++) m->slot[i].uses &= ~(1u << q);
  for (int i = 0; i < m->nhz; i++) {
    m_hazard *h = &m->hz[i];
    h->ents &= ~(1u << q);
    if (h->owner == q) {
      h->owner = FZ_DEAD;
      m->orphans = true;
    }
  }
  for (int r = 1; r <= FZ_QUEUES; r++) m->q[r].deps &= ~(1u << q);
  memset(&m->q[q], 0, sizeof m->q[q]);
}
