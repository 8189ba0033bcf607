/* ipc_import.c — memory across processes, the importer's half: opening in this process a block
 * another process exported (rap_ipc_import) and telling it when the block is closed here
 * (rap_ipc_close, in ipc_close.c). The exporter's half (the control block, the tickets, the ipc resource, export,
 * revoke) is ipc.c; what both share is ipc.h.
 *
 * This file holds the importer's state, one per manager (rapi_ipc_importer): an importer opens an
 * exporter's control block once per pool (pidfd_getfd), reserves the pool's range once, maps each
 * mapping the first time a block needs it, and serves later blocks from what it mapped. It claims
 * a ticket by compare and swap at import; its close sets the ticket closed at once on the host, by
 * a job on a CPU queue, or by an interprocess event recorded on a CUDA stream. For a StreamOrdered
 * pool it opens the pool's handle once and imports each allocation once while blocks of it are
 * open here (stream_ordered.c makes the CUDA calls). The manager's end closes what is still open
 * (rapi_ipc_manager_fini).
 */
#include "platforms/ipc_import.h"

#include <errno.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- the importer ------------------------------------------------------------------------------ */

pthread_mutex_t rapi_imp_make_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rapi_ipc_importer *importer(rap_manager *rm) {
  pthread_mutex_lock(&rapi_imp_make_lock);
  if (rm->ipc == NULL) {
    struct rapi_ipc_importer *im = rapi_calloc(1, sizeof *im);
    if (im != NULL) pthread_mutex_init(&im->lock, NULL);
    rm->ipc = im;
  }
  pthread_mutex_unlock(&rapi_imp_make_lock);
  return rm->ipc;
}

/* This process's start time, read once per process (a forked child reads its own). */
static uint64_t my_start(void) {
  static _Atomic uint64_t cached_pid_start[2];
  uint64_t pid = (uint64_t)getpid(), start = 0;
  if (cached_pid_start[0] == pid) return cached_pid_start[1];
  char state;
  if (!rapi_ipc_process_info((uint32_t)pid, &start, &state)) return 0;
  cached_pid_start[1] = start;
  cached_pid_start[0] = pid;
  return start;
}

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }
static int pidfd_getfd_(int pidfd, int fd) { return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0); }

static int exporter_gone(int32_t pid) {
  return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporting process %d is gone", pid);
}

/* Whether the exporter ended: its pidfd is readable once it has. */
static bool exporter_ended(const imp_pool *p) {
  struct pollfd pf = {p->pidfd, POLLIN, 0};
  return poll(&pf, 1, 0) > 0;
}

static int getfd_fail(int err, int32_t pid, const char *what) {
  if (err == ESRCH) return exporter_gone(pid);
  if (err == EPERM || err == EACCES)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_import: pidfd_getfd on process %d (%s): %s; "
                     "taking another process's file descriptor needs ptrace permission over it: "
                     "the same user, and where Yama's ptrace_scope is 1 the importer must be an "
                     "ancestor of the exporter, or the exporter calls prctl(PR_SET_PTRACER, "
                     "importer's pid); or CAP_SYS_PTRACE", pid, what, strerror(err));
  if (err == ENOSYS)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_import: pidfd_getfd needs Linux 5.6 or later");
  if (err == EBADF)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the pool this descriptor names is gone "
                     "from process %d (its descriptor of %s is closed)", pid, what);
  return rapi_fail(RAP_ERR_BACKEND, "rap_ipc_import: pidfd_getfd on process %d (%s): %s", pid, what,
                   strerror(err));
}

/* ---- the exporter's rows mapped here, seen by the exporter (ipc.h: mappers) ------------------ */

static uint64_t my_bit(const imp_pool *p) { return (uint64_t)1 << p->slot; }

/* Row i, mapped here, unmapped; then the exporter no longer counts this manager on it. */
static void row_unmap(imp_pool *p, unsigned i) {
  imp_extent *e = &p->rows[i];
  if (p->kind == RAPI_IPC_DEVICE) (void)rapi_ipc_device_unmap(p->base + e->offset, e->size);
  else (void)mmap(p->base + e->offset, e->size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  e->serial = 0;
  __atomic_and_fetch(&p->ctl->extents[i].mappers, ~my_bit(p), __ATOMIC_SEQ_CST);
}

/* Row i, mapped here and used by no open block, unmapped if the exporter gave it back, or (a
 * platform whose pools sleep) as soon as no close of it may still be queued: otherwise it is kept
 * for the next import, and the exporter cannot sleep it. */
void rapi_imp_row_let_go(imp_pool *p, unsigned i) {
  imp_extent *e = &p->rows[i];
  if (e->serial == 0 || e->refs > 0) return;
  if (LOAD(&p->ctl->extents[i].serial) == e->serial && !LOAD(&p->ctl->sleeps)) return;
  if (rapi_ipc_quiet(p->ctl, e->offset, e->offset + e->size)) row_unmap(p, i);
}

/* Every row mapped here that no open block uses, where pools of the platform sleep. */
void rapi_imp_rows_sweep(imp_pool *p) {
  if (p->rows == NULL || p->slot < 0 || !LOAD(&p->ctl->sleeps)) return;
  unsigned top = LOAD(&p->ctl->extents_top);
  for (unsigned i = 0; i < top && i < IPC_EXTENTS; i++) rapi_imp_row_let_go(p, i);
}

void rapi_imp_pool_free(imp_pool *p) {
  if (p->rows != NULL && p->base != NULL)
    for (unsigned i = 0; i < IPC_EXTENTS; i++)
      if (p->rows[i].serial != 0) row_unmap(p, i);
  if (p->slot >= 0) STORE(&p->ctl->mappers[p->slot].pid, 0);
  if (p->base != NULL) {
    if (p->kind == RAPI_IPC_DEVICE) rapi_ipc_device_unreserve(p->base, p->reserve);
    else munmap(p->raw, p->raw_size);
  }
  while (p->allocs != NULL) {   /* none is left open by a manager's end; a failed import's */
    imp_alloc *a = p->allocs;
    p->allocs = a->next;
    free(a->notes);
    free(a);
  }
  if (p->mempool != NULL) rapi_ipc_pool_close(p->device, p->mempool);
  if (p->ctl != NULL) munmap(p->ctl, sizeof(ipc_ctl));
  if (p->pidfd >= 0) close(p->pidfd);
  free(p->rows);
  free(p);
}

/* Opens the exporter's control block and reserves its range here: the same few calls whatever
 * the pool's size. */
static int pool_open(const ipc_desc *d, imp_pool **out) {
  imp_pool *p = rapi_calloc(1, sizeof *p);
  if (p == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  p->pidfd = -1;
  p->slot = -1;
  p->pid = d->pid;
  p->ctl_fd = d->ctl_fd;
  p->pool_id = d->pool_id;
  int st = RAP_OK;
  if ((p->rows = rapi_calloc(IPC_EXTENTS, sizeof *p->rows)) == NULL) {
    st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  } else if ((p->pidfd = pidfd_open_(d->pid)) < 0) {
    int err = errno;
    st = err == ESRCH ? exporter_gone(d->pid)
                      : rapi_fail(err == ENOSYS ? RAP_ERR_UNSUPPORTED : RAP_ERR_BACKEND,
                                  "rap_ipc_import: pidfd_open(%d): %s", d->pid, strerror(err));
  } else {
    int fd = pidfd_getfd_(p->pidfd, d->ctl_fd);
    struct stat sb;
    if (fd < 0) {
      st = getfd_fail(errno, d->pid, "the pool's shared table");
    } else {
      void *m = fstat(fd, &sb) == 0 && (size_t)sb.st_size >= sizeof(ipc_ctl)
                    ? mmap(NULL, sizeof(ipc_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
      close(fd);
      p->ctl = m == MAP_FAILED ? NULL : m;
      if (p->ctl == NULL || LOAD(&p->ctl->magic) != IPC_MAGIC || p->ctl->pool_id != d->pool_id ||
          p->ctl->version != IPC_VERSION || !LOAD(&p->ctl->alive))
        st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the pool this descriptor names was "
                       "destroyed in process %d", d->pid);
    }
  }
  if (st == RAP_OK) {
    p->kind = p->ctl->kind;
    p->reserve = p->ctl->reserve;
    if (p->kind != RAPI_IPC_HOST) {
      char bus[33];
      memcpy(bus, p->ctl->bus_id, 32);
      bus[32] = '\0';
      st = rapi_gpu_device_by_bus_id(bus, &p->device);
    }
    if (st == RAP_OK && p->kind == RAPI_IPC_POOL) {
      /* The pool's shareable handle, taken from the exporter as its mappings' are. */
      int fd = pidfd_getfd_(p->pidfd, p->ctl->pool_fd);
      if (fd < 0) {
        st = getfd_fail(errno, p->pid, "the pool's handle");
      } else {
        st = rapi_ipc_pool_open(p->device, fd, &p->mempool);
        close(fd);
        /* The number was still the pool's: the exporter marks the table gone before closing it. */
        if (st == RAP_OK && !LOAD(&p->ctl->alive))
          st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the pool this descriptor names was "
                         "destroyed in process %d", p->pid);
      }
    } else if (st == RAP_OK) {
      st = rapi_ipc_mapper_claim(p->ctl, p->pid, my_start(), &p->slot);   /* seen by a sleep */
    }
    if (st == RAP_OK && p->kind == RAPI_IPC_DEVICE) {
      st = rapi_ipc_device_reserve(p->device, p->reserve, p->ctl->granularity, &p->base);
    } else if (st == RAP_OK && p->kind == RAPI_IPC_HOST) {
      p->raw_size = p->reserve + p->ctl->granularity;
      p->raw = mmap(NULL, p->raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p->raw == MAP_FAILED) {
        p->raw = NULL;
        st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: reserving %zu bytes of addresses: %s",
                       p->reserve, strerror(errno));
      } else {
        p->base = (char *)rapi_align_up((uintptr_t)p->raw, p->ctl->granularity);
      }
    }
  }
  if (st != RAP_OK) {
    rapi_imp_pool_free(p);
    return st;
  }
  *out = p;
  return RAP_OK;
}

/* Maps row i of the exporter's table here (serial: what the row said when read); a device's
 * memory is given to the memory's device and to user, the device the block is used on. */
static int row_map_here(imp_pool *p, unsigned i, uint64_t serial, int user) {
  ipc_extent *x = &p->ctl->extents[i];
  uint64_t off = x->offset, size = x->size;
  int32_t xfd = x->fd;
  if (off > p->reserve || size > p->reserve - off)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the exporter's table is corrupt");
  int fd = -1, st = RAP_OK;
  char *addr = p->base + off;
  /* export=fabric (or auto where fabric worked): the fabric handle, which needs no descriptor of
   * the exporter's (the route across nodes); the POSIX descriptor where this process cannot
   * import it (no IMEX channel here). */
  bool fabric = p->kind == RAPI_IPC_DEVICE && (p->ctl->handle_types & RAPI_IPC_FABRIC);
  if (fabric) {
    unsigned char handle[sizeof x->fabric];
    memcpy(handle, x->fabric, sizeof handle);
    st = rapi_ipc_device_map(p->device, user, addr, size, -1, handle);
    fabric = st == RAP_OK;
    if (!fabric && xfd < 0) return st;
    if (!fabric)
      rap_log(RAP_LOG_INFO, "rap_ipc_import: a fabric handle of process %d was refused here (%s); "
              "its POSIX descriptor instead", p->pid, rap_last_error());
    st = RAP_OK;
  }
  if (!fabric && xfd >= 0 && (fd = pidfd_getfd_(p->pidfd, xfd)) < 0)
    return getfd_fail(errno, p->pid, "a mapping");
  if (!fabric && p->kind == RAPI_IPC_DEVICE) {
    st = fd >= 0 ? rapi_ipc_device_map(p->device, user, addr, size, fd, NULL)
                 : rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the exporter's table names neither a "
                             "descriptor nor a fabric handle for a mapping (corrupt)");
  } else if (!fabric && (fd < 0 || mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                                        fd, 0) == MAP_FAILED)) {
    st = rapi_fail(RAP_ERR_BACKEND, "rap_ipc_import: mapping %llu bytes of process %d's memory: %s",
                   (unsigned long long)size, p->pid, fd < 0 ? "no descriptor" : strerror(errno));
  }
  if (fd >= 0) close(fd);
  if (st != RAP_OK) return st;
  /* The descriptor number was still the row's while taken: the exporter clears the row before it
   * closes the descriptor, and a cleared row or a gone pool now means it may not have been. */
  if (LOAD(&x->serial) != serial || !LOAD(&p->ctl->alive)) {
    if (p->kind == RAPI_IPC_DEVICE) (void)rapi_ipc_device_unmap(addr, size);
    else (void)mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporter gave the memory back while "
                     "it was being opened");
  }
  bool other = p->kind == RAPI_IPC_DEVICE && user != p->device && user >= 0 && user < 64;
  p->rows[i] = (imp_extent){serial, off, size, 0, other ? (uint64_t)1 << user : 0};
  return RAP_OK;
}

/* row_map_here with this manager counted on the row first, so that an exporter's sleep that
 * holds the row either sees it or makes it let go (ipc.c, "sleep"); uncounted if nothing stays. */
static int row_map(imp_pool *p, unsigned i, uint64_t serial, int user) {
  __atomic_or_fetch(&p->ctl->extents[i].mappers, my_bit(p), __ATOMIC_SEQ_CST);
  int st = row_map_here(p, i, serial, user);
  if (st != RAP_OK) __atomic_and_fetch(&p->ctl->extents[i].mappers, ~my_bit(p), __ATOMIC_SEQ_CST);
  return st;
}

/* A device's row mapped here, used on device user: that device given access where it has none. */
static int row_reach(imp_pool *p, unsigned i, int user) {
  imp_extent *e = &p->rows[i];
  if (p->kind != RAPI_IPC_DEVICE || user < 0 || user == p->device || (user < 64 && (e->users >> user & 1)))
    return RAP_OK;
  int st = rapi_ipc_device_grant(p->device, user, p->base + e->offset, e->size);
  if (st == RAP_OK && user < 64) e->users |= (uint64_t)1 << user;
  return st;
}

/* Whether row i of the exporter's table, now at [off, off+size), may be mapped here: every row
 * mapped here on those addresses (i's earlier mapping, or another row's that the exporter gave
 * back before it mapped i there) is let go first. The exporter's live rows never overlap, so such
 * a row is stale; false where one stays (a block opened here still lies in it, or its close is
 * still queued), since mapping over it would change that block's memory under it. */
static bool room_for(imp_pool *p, unsigned i, uint64_t off, uint64_t size) {
  for (unsigned j = 0; j < IPC_EXTENTS; j++) {
    imp_extent *e = &p->rows[j];
    if (e->serial == 0 || (j != i && (e->offset >= off + size || e->offset + e->size <= off))) continue;
    rapi_imp_row_let_go(p, j);
    if (e->serial != 0) return false;
  }
  return true;
}

/* Whether the rows of a block open here (at the address a new import names) are still the
 * exporter's mappings and cover [off, off+size): else the new block lies in other memory. */
static bool rows_current(const imp_pool *p, const imp_block *b, uint64_t off, uint64_t size) {
  uint64_t end = off + (size ? size : 1), covered = 0;
  for (unsigned j = 0; j < b->nrows; j++) {
    const imp_extent *e = &p->rows[b->rows[j]];
    if (LOAD(&p->ctl->extents[b->rows[j]].serial) != e->serial) return false;
    uint64_t lo = e->offset > off ? e->offset : off, hi = e->offset + e->size < end ? e->offset + e->size : end;
    if (hi > lo) covered += hi - lo;
  }
  return covered == end - off;
}

static int busy_here(void) {
  return rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: the exporter mapped new memory where a block "
                   "opened here still lies (open, or its close still queued); close it first");
}

/* Every row that covers [off, off+size) mapped here, reached from user and counted for the block. */
static int rows_take(imp_pool *p, uint64_t off, uint64_t size, int user, unsigned **rows, unsigned *n) {
  uint64_t end = off + (size ? size : 1), covered = 0;
  unsigned top = LOAD(&p->ctl->extents_top), cap = 4, k = 0;
  unsigned *got = rapi_malloc(cap * sizeof *got);
  int st = got ? RAP_OK : rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  bool sweep = LOAD(&p->ctl->sleeps) != 0;
  for (unsigned i = 0; i < top && i < IPC_EXTENTS && st == RAP_OK; i++) {
    uint64_t serial = LOAD(&p->ctl->extents[i].serial);
    uint64_t xo = p->ctl->extents[i].offset, xs = p->ctl->extents[i].size;
    if (serial == 0 || xo >= end || xo + xs <= off) {
      if (sweep) rapi_imp_row_let_go(p, i);   /* pools there sleep: what no block here uses goes */
      continue;
    }
    if (p->rows[i].serial != serial) {
      if (!room_for(p, i, xo, xs)) {
        st = busy_here();
        break;
      }
      if ((st = row_map(p, i, serial, user)) != RAP_OK) break;
    }
    if ((st = row_reach(p, i, user)) != RAP_OK) break;
    if (k == cap) {
      unsigned *more = rapi_realloc(got, 2 * cap * sizeof *got);
      if (more == NULL) {
        st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
        break;
      }
      got = more;
      cap *= 2;
    }
    got[k++] = i;
    p->rows[i].refs++;
    covered += (xo + xs < end ? xo + xs : end) - (xo > off ? xo : off);
  }
  if (st == RAP_OK && covered != end - off)
    st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporter no longer maps the block "
                   "(given back, or its pool is asleep: import it again once the pool woke)");
  if (st != RAP_OK) {
    for (unsigned j = 0; j < k; j++) {
      p->rows[got[j]].refs--;
      rapi_imp_row_let_go(p, got[j]);
    }
    free(got);
    return st;
  }
  *rows = got;
  *n = k;
  return RAP_OK;
}

/* The allocation a claimed ticket of a pool names, imported here the first time a block of it is
 * opened; one more open import of it. */
static int alloc_take(imp_pool *p, const ipc_ticket *t, imp_alloc **out) {
  uint64_t id = t->alloc;
  imp_alloc *a = p->allocs;
  while (a != NULL && a->id != id) a = a->next;
  if (a == NULL) {
    unsigned char data[64];
    memcpy(data, t->data, sizeof data);
    if ((a = rapi_calloc(1, sizeof *a)) == NULL)
      return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
    void *ptr = NULL;
    int st = rapi_ipc_pool_import(p->device, p->mempool, data, &ptr);
    if (st != RAP_OK) {
      free(a);
      return st;
    }
    a->id = id;
    a->ptr = ptr;
    a->next = p->allocs;
    p->allocs = a;
  }
  a->refs++;
  *out = a;
  return RAP_OK;
}

void rapi_imp_alloc_drop(imp_pool *p, imp_alloc *a) {
  imp_alloc **pp = &p->allocs;
  while (*pp != a) pp = &(*pp)->next;
  *pp = a->next;
  free(a->notes);
  free(a);
}

/* Frees an allocation imported here, its last block closing on r (a CUDA resource; NULL: on the
 * host, waited for): after the work of earlier closes of its blocks on other streams, whose
 * events are still the ones the exporter waits for (a ticket that moved on has passed). */
int rapi_imp_alloc_free(imp_pool *p, imp_alloc *a, rap_resource *r) {
  void **events = a->nnotes ? rapi_malloc(a->nnotes * sizeof *events) : NULL;
  if (a->nnotes && events == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_close: out of host memory");
  unsigned n = 0;
  for (unsigned i = 0; i < a->nnotes; i++)
    if (LOAD(&p->ctl->tickets[a->notes[i].ticket].word) == a->notes[i].word)
      events[n++] = a->notes[i].e->event;
  int st = rapi_ipc_pool_free(p->device, a->ptr, r, events, n);
  free(events);
  return st;
}

/* Notes the event of a close that left blocks of a open; notes whose tickets moved on go. */
int rapi_imp_alloc_note(imp_pool *p, imp_alloc *a, unsigned ticket, uint64_t word, imp_event *e) {
  unsigned k = 0;
  for (unsigned i = 0; i < a->nnotes; i++)
    if (LOAD(&p->ctl->tickets[a->notes[i].ticket].word) == a->notes[i].word) a->notes[k++] = a->notes[i];
  a->nnotes = k;
  if (k == a->cap) {
    unsigned cap = a->cap ? 2 * a->cap : 4;
    imp_note *more = rapi_realloc(a->notes, cap * sizeof *more);
    if (more == NULL) return RAP_ERR_NOMEM;
    a->notes = more;
    a->cap = cap;
  }
  a->notes[a->nnotes++] = (imp_note){ticket, word, e};
  return RAP_OK;
}

static int claim(imp_pool *p, const ipc_desc *d, uint64_t *claimed) {
  if (!LOAD(&p->ctl->alive))
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the pool this descriptor names was "
                     "destroyed in process %d", d->pid);
  /* An exporter that ended without destroying its pool (a crash) left it marked alive, and what
   * this process mapped of it still reads: its pidfd says it ended. */
  if (exporter_ended(p)) return exporter_gone(d->pid);
  ipc_ticket *t = &p->ctl->tickets[d->ticket];
  uint64_t w = LOAD(&t->word);
  if (tw_serial(w) != d->serial || tw_state(w) == T_FREE)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the block this descriptor names is no "
                     "longer exported by process %d (freed there, or a stale descriptor)", d->pid);
  if (tw_state(w) == T_REVOKED)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: process %d revoked this descriptor "
                     "(rap_ipc_revoke) before it was imported", d->pid);
  if (tw_state(w) != T_SENT)
    return rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: this descriptor was imported already (by "
                     "process %u); each importer needs a descriptor of its own (rap_ipc_export "
                     "again)", tw_pid(w));
  if (t->offset != d->offset || t->size != d->size || d->ctl_fd != p->ctl_fd || d->kind != p->kind)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the descriptor does not match what process "
                     "%d exported (forged)", d->pid);
  uint64_t to = tword(d->serial, (uint32_t)getpid(), T_CLAIMED);
  if (!cas(&t->word, w, to))
    return rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: another importer took this descriptor first");
  STORE(&t->start, my_start());
  *claimed = to;
  return RAP_OK;
}

static void unclaim(imp_pool *p, unsigned ticket, uint64_t claimed) {
  (void)cas(&p->ctl->tickets[ticket].word, claimed, tword(tw_serial(claimed), 0, T_SENT));
}

/* What a pool asks of the importer before anything is claimed: a StreamOrdered pool's block is used
 * on a CUDA stream or on the host, its pool reached from that device; a DeviceVmm block's device
 * (user) can reach the memory. */
static int import_where(imp_pool *p, rap_resource *r, int *user) {
  *user = -1;
  if (p->kind == RAPI_IPC_DEVICE) return rapi_ipc_device_user(p->device, r, &p->reach, user);
  if (p->kind != RAPI_IPC_POOL) return RAP_OK;
  if (r != NULL && r->ops->record != NULL && strcmp(r->ops->kind, "cuda") != 0)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: a block of a StreamOrdered pool is used and "
                     "closed on a CUDA stream or on the host, not on a %s resource", r->ops->kind);
  return rapi_ipc_pool_reach(p->device, p->mempool, r, &p->granted);
}

int rap_ipc_import(rap_manager *rm, const rap_ipc_desc *desc, rap_resource *r, void **out) {
  if (rm == NULL || desc == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: manager, descriptor or out is NULL");
  if (r != NULL && r->rm != rm)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the resource belongs to another manager");
  ipc_desc d;
  int st = rapi_ipc_desc_read("rap_ipc_import", desc, &d);
  if (st != RAP_OK) return st;
  if (d.pid == (int32_t)getpid())
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the block was exported by this process "
                     "(pid %d); use its pointer here: import is for other processes", d.pid);
  struct rapi_ipc_importer *im = importer(rm);
  if (im == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  rapi_held held;
  rapi_lock(&im->lock, &held);
  imp_pool *p = im->pools;
  while (p != NULL && (p->pid != d.pid || p->pool_id != d.pool_id)) p = p->next;
  if (p == NULL && (st = pool_open(&d, &p)) == RAP_OK) {
    p->next = im->pools;
    im->pools = p;
  }
  int user = -1;
  if (st == RAP_OK) st = import_where(p, r, &user);
  uint64_t claimed = 0;
  if (st == RAP_OK) st = claim(p, &d, &claimed);
  imp_block *b = NULL;
  imp_ticket *tk = NULL;
  imp_alloc *al = NULL;
  if (st == RAP_OK && p->kind == RAPI_IPC_POOL) st = alloc_take(p, &p->ctl->tickets[d.ticket], &al);
  void *ptr = st != RAP_OK ? NULL : al != NULL ? al->ptr + d.offset : p->base + d.offset;
  if (st == RAP_OK) {
    tk = rapi_calloc(1, sizeof *tk);
    HASH_FIND_PTR(im->blocks, &ptr, b);
    if (tk == NULL) st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  }
  if (st == RAP_OK && b != NULL && al == NULL && !rows_current(p, b, d.offset, d.size)) st = busy_here();
  for (unsigned j = 0; st == RAP_OK && b != NULL && j < b->nrows; j++) st = row_reach(p, b->rows[j], user);
  if (st == RAP_OK && b == NULL) {
    imp_block *nb = rapi_calloc(1, sizeof *nb);
    if (nb == NULL) st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
    if (st == RAP_OK && al == NULL) st = rows_take(p, d.offset, d.size, user, &nb->rows, &nb->nrows);
    bool added = false;
    if (st == RAP_OK) {
      nb->ptr = ptr;
      nb->pool = p;
      nb->alloc = al;
      RAPI_HASH_TRY(added, HASH_ADD_PTR(im->blocks, ptr, nb));
      if (!added) {
        for (unsigned j = 0; j < nb->nrows; j++) p->rows[nb->rows[j]].refs--;
        free(nb->rows);
        st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
      }
    }
    if (added) b = nb;
    else free(nb);
  }
  if (st == RAP_OK) {
    tk->ticket = d.ticket;
    tk->word = claimed;
    tk->r = r;
    tk->next = b->tickets;
    b->tickets = tk;
    *out = ptr;
  } else {
    free(tk);
    if (al != NULL && --al->refs == 0) {   /* imported for this block alone: given back */
      if (rapi_ipc_pool_free(p->device, al->ptr, NULL, NULL, 0) != RAP_OK)
        rap_log(RAP_LOG_WARN, "rap_ipc_import: giving back an allocation it imported: %s",
                rap_last_error());
      rapi_imp_alloc_drop(p, al);
    }
    if (claimed != 0) unclaim(p, d.ticket, claimed);
  }
  rapi_unlock(&held);
  return st;
}
