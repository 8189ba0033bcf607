/* ipc.c — memory across processes, the exporter's half: a block of a pool over an exporting
 * platform (HostVmm, DeviceVmm or StreamOrdered with export=) is described by a small descriptor,
 * opened in another process, and kept out of the exporter's pool until every importer closed it
 * and the work it queued has passed. The importer's half is ipc_import.c; what both share (the
 * control block's layout, the descriptor, the ticket word) is ipc.h.
 *
 * This file holds the exporter's side: the control block in shared memory (a memfd) that an
 * exporting platform keeps, a header, the table of its mappings (each with the file descriptor
 * number of its memory in the exporter) and a table of tickets, one per export, whose state word
 * the importer and the exporter change by compare and swap; the platform's ipc resource, on which
 * the exporter's pool sees each export as a use of the block, fenced per block
 * (rapi_resource_ops.use_*): its free keeps the block pending until the ticket says closed and
 * passed, or the importer is gone (watched through a pidfd, its start time read from /proc);
 * rap_ipc_export, rap_ipc_revoke, and the reading of a descriptor. A StreamOrdered pool (CUDA's
 * pool IPC) has no range and no mappings: its ticket carries the allocation the block lies in (an
 * id, the block's offset in it and cudaMemPoolExportPointer's data). The exporting platform is
 * reached through its record's export entry (rap_internal.h), never by its symbols.
 */
#include "platforms/ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DESC_MAGIC 0x43504952u                    /* "RIPC" */
#define NO_SLOT UINT32_MAX

static uint64_t desc_check(const ipc_desc *d) {
  const unsigned char *p = (const unsigned char *)d;
  uint64_t h = UINT64_C(14695981039346656037);
  for (size_t i = 0; i < offsetof(ipc_desc, check); i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

/* The start time of a process and its state letter, from /proc/PID/stat; false if it is gone. */
bool rapi_ipc_process_info(uint32_t pid, uint64_t *start, char *state) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');   /* the command may hold spaces and parentheses */
  if (p == NULL || p[1] == '\0' || p[2] == '\0') return false;
  *state = p[2];
  p += 3;
  for (int field = 4; field < 22 && p != NULL; field++) p = strchr(p + 1, ' ');
  *start = p != NULL ? strtoull(p + 1, NULL, 10) : 0;
  return true;
}

bool rapi_ipc_process_alive(uint32_t pid, uint64_t start) {
  uint64_t now = 0;
  char state = '?';
  if (pid == 0) return true;
  if (!rapi_ipc_process_info(pid, &now, &state) || state == 'Z' || state == 'X') return false;
  return start == 0 || now == start;   /* another start time: the pid was reused */
}

/* ---- the exporter ----------------------------------------------------------------------------- */

struct rapi_ipc_export {
  rap_resource r;                 /* the ipc resource: first, so its operations find the rest */
  pthread_mutex_t lock;           /* the tickets' exporter side, the opened events */
  rap_allocator *self;            /* the exporting platform (its record's export entry locates) */
  ipc_ctl *ctl;
  int ctl_fd;
  unsigned next_ticket;
  uint64_t next_serial;           /* of mappings */
  struct opened *opened;          /* device: importers' events, each opened here once */
  struct {                        /* importers watched through a pidfd: a poll says it ended */
    uint32_t pid;
    uint64_t start;
    int pidfd;
  } watch[32];
  unsigned nwatch, next_watch;
  unsigned char used[IPC_EXTENTS];   /* rows of live mappings, held ones too */
};

/* An importer records one event for many closes, one after another: it is opened here once. */
typedef struct opened {
  unsigned char handle[64];
  void *event;
  struct opened *next;
} opened;

/* The token of the last use bound on this thread (rap_ipc_export reads it after the record). */
static _Thread_local uint64_t bound_token;
static _Thread_local rapi_ipc_export *bound_by;

static rapi_ipc_export *of_resource(rap_resource *r) { return (rapi_ipc_export *)(void *)r; }

/* A ticket whose export has ended for good: taken back (FREE), closed on the host or by a queue
 * that passed the close (DONE), or revoked. Its slot may go to another export at once: the use that
 * held it, if the pool still keeps one, sees another serial, which is passed, and its drop
 * changes nothing. */
static bool ended(uint64_t w) {
  unsigned s = tw_state(w);
  return s == T_FREE || s == T_DONE || s == T_REVOKED;
}

/* Whether an importer still runs, under x->lock. The first time a process is asked about, /proc
 * says whether it is the one that imported (its start time) and a pidfd is opened on it; after
 * that one poll of the pidfd answers (readable: it ended), so a pool holding many blocks of live
 * importers pays a system call each, not a read of /proc. */
static bool watched_alive(rapi_ipc_export *x, uint32_t pid, uint64_t start) {
  if (pid == 0) return true;   /* claimed just now: the pid comes with the claim */
  for (unsigned i = 0; i < x->nwatch; i++) {
    if (x->watch[i].pid != pid || x->watch[i].start != start) continue;
    struct pollfd pf = {x->watch[i].pidfd, POLLIN, 0};
    return poll(&pf, 1, 0) == 0;
  }
  if (!rapi_ipc_process_alive(pid, start)) return false;
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd < 0) return errno != ESRCH;
  if (!rapi_ipc_process_alive(pid, start)) {   /* the pid was reused before the pidfd was opened */
    close(fd);
    return false;
  }
  unsigned i = x->nwatch < 32 ? x->nwatch++ : x->next_watch++ % 32;
  if (x->watch[i].pid != 0) close(x->watch[i].pidfd);   /* a slot used before */
  x->watch[i].pid = pid;
  x->watch[i].start = start;
  x->watch[i].pidfd = fd;
  return true;
}

/* Whether the importer's CUDA event recorded for a close completed, under x->lock (1 yes, 0 not
 * yet, < 0 a status); each importer's event is opened here once. */
static int event_passed(rapi_ipc_export *x, const ipc_ticket *t) {
  opened *o = x->opened;
  while (o != NULL && memcmp(o->handle, t->event, sizeof o->handle) != 0) o = o->next;
  if (o != NULL) return rapi_gpu_ipc_event_query(o->handle, &o->event);
  if ((o = rapi_calloc(1, sizeof *o)) == NULL) return RAP_ERR_NOMEM;
  memcpy(o->handle, t->event, sizeof o->handle);
  int q = rapi_gpu_ipc_event_query(o->handle, &o->event);
  if (q < 0 && o->event == NULL) {
    free(o);
  } else {
    o->next = x->opened;
    x->opened = o;
  }
  return q;
}

/* Whether an imported ticket (its word w) has passed, under x->lock: closed on a CUDA stream whose
 * event completed, or its importer (or the one who would import it) gone. One that passed so is
 * marked DONE, so that later questions, and an export looking for a slot, see it ended. */
static bool imported_passed(rapi_ipc_export *x, ipc_ticket *t, uint64_t w) {
  if (tw_state(w) == T_EVENT) {
    int q = event_passed(x, t);
    if (q == 1) {
      (void)cas(&t->word, w, tword(tw_serial(w), tw_pid(w), T_DONE));
      return true;
    }
    if (q < 0)
      rap_log(RAP_LOG_DEBUG, "%s: querying an importer's event: %s", rap_allocator_name(x->self),
              rap_last_error());
  }
  if (watched_alive(x, tw_pid(w), LOAD(&t->start))) return false;
  rap_log(RAP_LOG_INFO, "%s: importer process %u ended without closing a block of %llu bytes at "
          "offset %llu: the block is no longer held for it", rap_allocator_name(x->self), tw_pid(w),
          (unsigned long long)t->size, (unsigned long long)t->offset);
  (void)cas(&t->word, w, tword(tw_serial(w), tw_pid(w), T_DONE));
  return true;
}

/* A free ticket for an export, under x->lock: the next one that ended, in turn; where none has,
 * every imported one is asked whether it passed (only when all 4096 are out). */
static int ticket_find(rapi_ipc_export *x) {
  for (int asked = 0; asked < 2; asked++)
    for (unsigned n = 0; n < IPC_TICKETS; n++) {
      unsigned i = (x->next_ticket + n) % IPC_TICKETS;
      ipc_ticket *t = &x->ctl->tickets[i];
      uint64_t w = LOAD(&t->word);
      if (ended(w) || (asked && tw_state(w) != T_SENT && imported_passed(x, t, w) &&
                       ended(LOAD(&t->word))))
        return (int)i;
    }
  return -1;
}

/* A block the pool records on the ipc resource gets a ticket: SENT, with its place (the platform
 * says where it lies) and size. */
static int ipc_use_bind(rap_resource *r, void *ptr, size_t bytes, uint64_t *token) {
  rapi_ipc_export *x = of_resource(r);
  rapi_ipc_place place;
  memset(&place, 0, sizeof place);
  int st = x->self->platform->exporter->locate(x->self, ptr, bytes, &place);
  if (st != RAP_OK) return st;
  pthread_mutex_lock(&x->lock);
  int i = ticket_find(x);
  if (i >= 0) {
    ipc_ticket *t = &x->ctl->tickets[i];
    /* An ended word changes under x->lock alone: no importer touches it. */
    uint64_t serial = (tw_serial(LOAD(&t->word)) + 1) & 0xffffff;
    if (serial == 0) serial = 1;
    t->offset = place.offset;
    t->size = bytes;
    t->start = 0;
    t->alloc = place.alloc;
    memcpy(t->data, place.data, sizeof t->data);
    STORE(&t->word, tword(serial, 0, T_SENT));
    x->next_ticket = ((unsigned)i + 1) % IPC_TICKETS;
    *token = serial << 32 | (unsigned)i;
    bound_token = *token;
    bound_by = x;
  }
  pthread_mutex_unlock(&x->lock);
  if (i < 0)
    return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_export: '%s' has %u exports open (every one until its "
                     "importer closed it, or its exporter revoked it), its most",
                     rap_allocator_name(x->self), IPC_TICKETS);
  return RAP_OK;
}

/* Passed: closed on the host, closed on a queue that reached the close, revoked, closed on a CUDA
 * stream whose event completed, or the importer (or the one who would import it) is gone. */
static int ipc_use_passed(rap_resource *r, uint64_t token) {
  rapi_ipc_export *x = of_resource(r);
  ipc_ticket *t = &x->ctl->tickets[token & 0xffffffff];
  uint64_t w = LOAD(&t->word);
  if (tw_serial(w) != token >> 32 || ended(w)) return 1;   /* another serial: taken back already */
  if (tw_state(w) == T_SENT) return 0;   /* not imported yet: the descriptor may be on its way */
  pthread_mutex_lock(&x->lock);
  bool passed = imported_passed(x, t, w);
  pthread_mutex_unlock(&x->lock);
  return passed;
}

/* Ended for good, known from the ticket's word alone. */
static int ipc_use_over(rap_resource *r, uint64_t token) {
  uint64_t w = LOAD(&of_resource(r)->ctl->tickets[token & 0xffffffff].word);
  return tw_serial(w) != token >> 32 || ended(w);
}

static void ipc_use_drop(rap_resource *r, uint64_t token) {
  rapi_ipc_export *x = of_resource(r);
  unsigned i = (unsigned)(token & 0xffffffff);
  ipc_ticket *t = &x->ctl->tickets[i];
  pthread_mutex_lock(&x->lock);
  uint64_t w = LOAD(&t->word);
  while (tw_serial(w) == token >> 32 && tw_state(w) != T_FREE &&
         !cas(&t->word, w, tword(token >> 32, 0, T_FREE)))
    w = LOAD(&t->word);
  pthread_mutex_unlock(&x->lock);
}

/* The ipc resource is synchronous to every pool (no events of its own): its uses are per block. */
static int ipc_synchronize(rap_resource *r) {
  (void)r;
  return RAP_OK;
}
static void ipc_destroy(rap_resource *r) { (void)r; }
static int ipc_submit(rap_resource *r, void (*fn)(void *), void *arg) {
  (void)r;
  (void)fn;
  (void)arg;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "the ipc resource runs no work");
}
static int ipc_query(rapi_event *e) {
  (void)e;
  return 1;
}
static int ipc_event_synchronize(rapi_event *e) {
  (void)e;
  return RAP_OK;
}
static int ipc_wait(rap_resource *r, rapi_event *e) {
  (void)r;
  (void)e;
  return RAPI_HOST_WAIT;
}
static const rapi_resource_ops ipc_ops = {
    .kind = "ipc",
    .synchronize = ipc_synchronize,
    .destroy = ipc_destroy,
    .submit = ipc_submit,
    .record = NULL,
    .query = ipc_query,
    .event_synchronize = ipc_event_synchronize,
    .wait = ipc_wait,
    .use_bind = ipc_use_bind,
    .use_passed = ipc_use_passed,
    .use_drop = ipc_use_drop,
    .use_over = ipc_use_over,
};

static uint64_t random_id(void) {
  uint64_t id = 0;
  if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id || id == 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    id = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ 1;
  }
  return id;
}

/* The shared table and the ipc resource of an exporting platform of any kind. */
static int export_make(rap_allocator *self, int kind, int device, rapi_ipc_export **out) {
  const char *who = rap_allocator_name(self);
  rapi_ipc_export *x = rapi_calloc(1, sizeof *x);
  if (x == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", who);
  x->ctl_fd = memfd_create("rap-ipc", MFD_CLOEXEC);
  if (x->ctl_fd < 0 || ftruncate(x->ctl_fd, sizeof(ipc_ctl)) != 0 ||
      (x->ctl = mmap(NULL, sizeof(ipc_ctl), PROT_READ | PROT_WRITE, MAP_SHARED, x->ctl_fd, 0)) ==
          MAP_FAILED) {
    int err = errno;
    if (x->ctl_fd >= 0) close(x->ctl_fd);
    free(x);
    return rapi_fail(err == ENOMEM ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "%s: making the shared table "
                     "of an exporting platform (memfd_create, mmap): %s", who, strerror(err));
  }
  ipc_ctl *c = x->ctl;
  c->pool_id = random_id();
  c->version = IPC_VERSION;
  c->kind = (uint32_t)kind;
  c->pid = (int32_t)getpid();
  c->device = device;
  c->pool_fd = -1;
  if (kind != RAPI_IPC_HOST) {
    int st = rapi_gpu_bus_id(device, c->bus_id, sizeof c->bus_id);
    if (st != RAP_OK) {
      munmap(x->ctl, sizeof(ipc_ctl));
      close(x->ctl_fd);
      free(x);
      return st;
    }
  }
  for (unsigned i = 0; i < IPC_EXTENTS; i++) c->extents[i].fd = -1;
  pthread_mutex_init(&x->lock, NULL);
  x->self = self;
  x->r.ops = &ipc_ops;
  x->r.rm = self->rm;
  x->r.key = (uintptr_t)&x->r;
  rapi_event_pool_init(&x->r);
  x->r.id = 0;   /* not in the manager's list (made under its lock): the platform owns it */
  *out = x;
  return RAP_OK;
}

static void export_open(rapi_ipc_export *x) {
  x->ctl->alive = 1;
  STORE(&x->ctl->magic, IPC_MAGIC);
}

int rapi_ipc_export_start(rapi_vmm *v, int kind) {
  rapi_ipc_export *x = NULL;
  int st = export_make(v->self, kind, v->device, &x);
  if (st != RAP_OK) return st;
  x->ctl->reserve = v->reserve;
  x->ctl->granularity = v->granularity;
  x->ctl->handle_types = v->handle_types;
  export_open(x);
  v->ipc = x;
  return RAP_OK;
}

int rapi_ipc_pool_export_start(rap_allocator *self, int device, int pool_fd, rapi_ipc_export **out) {
  rapi_ipc_export *x = NULL;
  int st = export_make(self, RAPI_IPC_POOL, device, &x);
  if (st != RAP_OK) return st;
  x->ctl->handle_types = RAPI_IPC_POSIX;
  x->ctl->pool_fd = pool_fd;
  export_open(x);
  *out = x;
  return RAP_OK;
}

/* From now on importers are refused; what they mapped stays theirs until they close it. */
void rapi_ipc_pool_export_stop(rapi_ipc_export *x) {
  if (x == NULL) return;
  STORE(&x->ctl->alive, 0);
  for (unsigned i = 0; i < x->nwatch; i++) close(x->watch[i].pidfd);
  while (x->opened != NULL) {
    opened *o = x->opened;
    x->opened = o->next;
    rapi_gpu_ipc_event_close(o->event);
    free(o);
  }
  munmap(x->ctl, sizeof(ipc_ctl));
  close(x->ctl_fd);
  pthread_mutex_destroy(&x->lock);
  pthread_mutex_destroy(&x->r.event_lock);
  free(x);
}

void rapi_ipc_export_stop(rapi_vmm *v) {
  rapi_ipc_pool_export_stop(v->ipc);
  v->ipc = NULL;
}

int rapi_ipc_extent_add(rapi_vmm *v, rapi_vmm_extent *e, bool held) {
  rapi_ipc_export *x = v->ipc;
  ipc_ctl *c = x->ctl;
  for (unsigned i = 0; i < IPC_EXTENTS; i++) {
    if (x->used[i]) continue;
    ipc_extent *r = &c->extents[i];
    r->offset = (uint64_t)(e->addr - v->base);
    r->size = e->size;
    r->fd = e->share.fd;
    memcpy(r->fabric, e->share.fabric, sizeof r->fabric);
    if (i + 1 > LOAD(&c->extents_top)) STORE(&c->extents_top, i + 1);
    x->used[i] = 1;
    e->share.slot = i;
    e->share.serial = ++x->next_serial;
    e->share.held = held;
    if (!held) STORE(&r->serial, e->share.serial);
    return RAP_OK;
  }
  return rapi_fail(RAP_ERR_NOMEM, "%s: an exporting platform holds at most %u mappings; a larger "
                   "granularity= or next_size= makes fewer", rap_allocator_name(v->self), IPC_EXTENTS);
}

void rapi_ipc_extent_shared(rapi_vmm *v, rapi_vmm_extent *e) {
  if (e->share.slot == NO_SLOT) return;
  ipc_extent *r = &v->ipc->ctl->extents[e->share.slot];
  memcpy(r->fabric, e->share.fabric, sizeof r->fabric);
  STORE(&r->fd, e->share.fd);
}

void rapi_ipc_extent_remove(rapi_vmm *v, rapi_vmm_extent *e) {
  if (e->share.slot == NO_SLOT) return;
  STORE(&v->ipc->ctl->extents[e->share.slot].serial, 0);
  v->ipc->used[e->share.slot] = 0;
  e->share.slot = NO_SLOT;
  e->share.held = false;
}

/* ---- sleep: no other process may map what a pool unmaps ---------------------------------------
 * An importer sets its bit in a row's mappers before it maps the row and clears it after it
 * unmapped; after mapping it reads the row's serial again and lets go if it changed. A hold clears
 * the serials of its rows first and reads the bits after: so either it sees the importer's bit, or
 * the importer sees the cleared serial and unmaps (both sequentially consistent). An importer that
 * ended maps nothing, whatever its bits say. */

/* The first importer still running that maps a held row in [lo, hi): its slot, how many of those
 * rows it maps (*rows) and how many blocks there it has open (*open); -1 if none. */
static int first_mapper(rapi_vmm *v, rapi_vmm_extent *from, char *lo, char *hi, unsigned *rows,
                        unsigned *open) {
  ipc_ctl *c = v->ipc->ctl;
  uint64_t seen = 0;
  for (rapi_vmm_extent *e = from; e != NULL && e->addr < hi; e = e->next)
    if (e->addr >= lo && e->share.held) seen |= LOAD(&c->extents[e->share.slot].mappers);
  for (unsigned s = 0; s < IPC_MAPPERS; s++) {
    if (!(seen >> s & 1)) continue;
    int32_t pid = LOAD(&c->mappers[s].pid);
    if (pid <= 0 || !rapi_ipc_process_alive((uint32_t)pid, LOAD(&c->mappers[s].start))) continue;
    *rows = *open = 0;
    for (rapi_vmm_extent *e = from; e != NULL && e->addr < hi; e = e->next)
      if (e->addr >= lo && e->share.held) *rows += LOAD(&c->extents[e->share.slot].mappers) >> s & 1;
    uint64_t off_lo = (uint64_t)(lo - v->base), off_hi = (uint64_t)(hi - v->base);
    for (unsigned t = 0; t < IPC_TICKETS; t++) {
      uint64_t w = LOAD(&c->tickets[t].word);
      if (tw_state(w) == T_CLAIMED && tw_pid(w) == (uint32_t)pid && c->tickets[t].offset >= off_lo &&
          c->tickets[t].offset < off_hi)
        (*open)++;
    }
    return (int)s;
  }
  return -1;
}

int rapi_ipc_hold(rapi_vmm *v, rapi_vmm_extent *from, char *lo, char *hi, int how) {
  ipc_ctl *c = v->ipc->ctl;
  if (how != RAPI_UNHOLD) STORE(&c->sleeps, 1);
  if (how == RAPI_HOLD_NOTICE) return RAP_OK;
  if (from == NULL) from = v->first;
  for (rapi_vmm_extent *e = from; e != NULL && e->addr < hi; e = e->next) {
    if (e->addr < lo || e->share.slot == NO_SLOT || e->share.held == (how == RAPI_HOLD)) continue;
    e->share.held = how == RAPI_HOLD;
    STORE(&c->extents[e->share.slot].serial, how == RAPI_HOLD ? 0 : e->share.serial);
  }
  unsigned rows = 0, open = 0;
  int s = how == RAPI_HOLD ? first_mapper(v, from, lo, hi, &rows, &open) : -1;
  if (s < 0) return RAP_OK;
  int32_t pid = LOAD(&c->mappers[s].pid);
  (void)rapi_ipc_hold(v, from, lo, hi, RAPI_UNHOLD);
  if (open > 0)
    return rapi_fail(RAP_ERR_BUSY, "process %d maps %u of its mappings of '%s', where it holds %u "
                     "imported block%s open: unmapped here they would live on there, and a wake "
                     "would map memory that process does not see; sleep once it closed them "
                     "(rap_ipc_close)", (int)pid, rows, rap_allocator_name(v->self), open,
                     open == 1 ? "" : "s");
  return rapi_fail(RAP_ERR_BUSY, "process %d maps %u of its mappings of '%s' with no block of its "
                   "own open there (kept from an earlier import): it lets them go at its next "
                   "rap_ipc_import or rap_ipc_close, or when its manager goes, and from now on as "
                   "soon as its last block in one closes", (int)pid, rows,
                   rap_allocator_name(v->self));
}

/* The importer's half of the mappers, beside the exporter's so that one place says the protocol.
 * A free slot, or else one of a process that ended, whose bits are cleared first (it maps
 * nothing); the start time is stored after the claim, so a hold may briefly take the new
 * importer for the ended one, which maps nothing yet either. */
int rapi_ipc_mapper_claim(ipc_ctl *c, int32_t pid, uint64_t start, int *slot) {
  int32_t me = (int32_t)getpid();
  for (int ended = 0; ended < 2; ended++)
    for (unsigned s = 0; s < IPC_MAPPERS; s++) {
      int32_t was = LOAD(&c->mappers[s].pid);
      if (ended ? was == 0 || rapi_ipc_process_alive((uint32_t)was, LOAD(&c->mappers[s].start)) : was != 0)
        continue;
      if (!__atomic_compare_exchange_n(&c->mappers[s].pid, &was, me, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST))
        continue;
      STORE(&c->mappers[s].start, start);
      for (unsigned i = 0; ended && i < IPC_EXTENTS; i++)
        __atomic_and_fetch(&c->extents[i].mappers, ~((uint64_t)1 << s), __ATOMIC_SEQ_CST);
      *slot = (int)s;
      return RAP_OK;
    }
  return rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: %u managers import from process %d's pool at "
                   "once, its most", IPC_MAPPERS, (int)pid);
}

bool rapi_ipc_quiet(ipc_ctl *c, uint64_t lo, uint64_t hi) {
  uint32_t me = (uint32_t)getpid();
  for (unsigned t = 0; t < IPC_TICKETS; t++) {
    uint64_t w = LOAD(&c->tickets[t].word);
    if ((tw_state(w) != T_CLOSING && tw_state(w) != T_EVENT) || tw_pid(w) != me) continue;
    uint64_t off = c->tickets[t].offset, size = c->tickets[t].size;
    if (off < hi && off + (size ? size : 1) > lo) return false;
  }
  return true;
}

/* ---- export --------------------------------------------------------------------------------- */

/* The exporting state of a's platform, asked through the export entry of the record its chain
 * inherits (rap_internal.h); *e NULL where the platform cannot export. */
static rapi_ipc_export *exporting(const rap_allocator *a, const rapi_platform_export **e) {
  const rapi_platform *p = a->platform;
  *e = p != NULL && p->root != NULL ? p->exporter : NULL;
  return *e != NULL ? (*e)->state(p->root) : NULL;
}

/* The chain's platform allocator, for sentences. */
static rap_allocator *root_of(rap_allocator *a) {
  while (a->parent != NULL) a = a->parent;
  return a;
}

/* A refusal of the record the export makes (a pointer that is not a live block, a pool asleep),
 * said again under the name of the call the program made. */
static int as_export(const rap_allocator *a, int st) {
  const char *said = rap_last_error();
  if (strncmp(said, "rap_record_resource", strlen("rap_record_resource")) != 0) return st;
  const char *rest = strstr(said, ": ");
  char copy[512];
  snprintf(copy, sizeof copy, "%s", rest != NULL ? rest + 2 : said);
  return rapi_fail(st, "rap_ipc_export('%s'): %s", a->name, copy);
}

int rap_ipc_export(rap_allocator *a, void *ptr, rap_ipc_desc *out) {
  if (a == NULL || out == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_ipc_export: allocator or out is NULL");
  if (ptr == NULL) return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_ipc_export('%s'): pointer is NULL", a->name);
  rap_allocator *root = root_of(a);
  const rapi_platform_export *e = NULL;
  rapi_ipc_export *x = exporting(a, &e);
  if (e == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): its memory comes from '%s' (%s), "
                     "which no other process can open; make the pool over DeviceVmm(export=posix), "
                     "HostVmm(export=posix) or StreamOrdered(pool=new, export=posix)", a->name,
                     root->name, root->strategy->name);
  if (x == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): '%s' was made without export=; "
                     "%s(%s) makes memory other processes can open", a->name, root->name,
                     root->strategy->name, e->options);
  if (a == root)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): export a block of a "
                     "ResourceAwarePool over it, whose free keeps the block until its importers "
                     "closed it", a->name);
  bound_by = NULL;
  int st = rap_record_resource(a, ptr, &x->r);
  if (st == RAP_ERR_UNSUPPORTED)
    return rapi_fail(st, "rap_ipc_export('%s'): its chain keeps no per-stream lifetime for blocks "
                     "(%s); export needs a ResourceAwarePool (under ThreadSafe or ThreadCache at "
                     "most) over the exporting platform", a->name, rap_last_error());
  if (st != RAP_OK) return as_export(a, st);
  if (bound_by != x)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): no ResourceAwarePool in its chain "
                     "took the export", a->name);
  unsigned i = (unsigned)(bound_token & 0xffffffff);
  const ipc_ticket *t = &x->ctl->tickets[i];
  ipc_desc d;
  memset(&d, 0, sizeof d);
  d.magic = DESC_MAGIC;
  d.version = IPC_VERSION;
  d.kind = (uint16_t)x->ctl->kind;
  d.pid = (int32_t)getpid();
  d.ctl_fd = x->ctl_fd;
  d.pool_id = x->ctl->pool_id;
  d.ticket = i;
  d.serial = (uint32_t)(bound_token >> 32);
  d.offset = t->offset;
  d.size = t->size;
  d.check = desc_check(&d);
  memcpy(out, &d, sizeof d);
  return RAP_OK;
}

/* A descriptor's fields, checked: RAP_ERR_INVALID with a sentence (who: the call) if it is not one
 * rap_ipc_export made. */
int rapi_ipc_desc_read(const char *who, const rap_ipc_desc *desc, ipc_desc *d) {
  memcpy(d, desc, sizeof *d);
  if (d->magic == DESC_MAGIC && d->version != IPC_VERSION && d->check == desc_check(d))
    return rapi_fail(RAP_ERR_INVALID, "%s: the descriptor was made by another version of rap "
                     "(descriptor version %u, this rap reads %u); exporter and importer need the "
                     "same", who, (unsigned)d->version, IPC_VERSION);
  if (d->magic != DESC_MAGIC || d->version != IPC_VERSION || d->check != desc_check(d) || d->pad != 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: not a descriptor rap_ipc_export made (truncated, forged "
                     "or corrupted: its check does not match)", who);
  if (d->ticket >= IPC_TICKETS ||
      (d->kind != RAPI_IPC_HOST && d->kind != RAPI_IPC_DEVICE && d->kind != RAPI_IPC_POOL))
    return rapi_fail(RAP_ERR_INVALID, "%s: not a descriptor rap_ipc_export made: its ticket (%u) or "
                     "kind (%u) is out of range, though its check matches (forged)", who,
                     (unsigned)d->ticket, (unsigned)d->kind);
  if (d->pid <= 0)
    return rapi_fail(RAP_ERR_INVALID, "%s: not a descriptor rap_ipc_export made: it names no "
                     "process (pid %d), though its check matches (forged)", who, (int)d->pid);
  return RAP_OK;
}

int rap_ipc_revoke(rap_allocator *a, const rap_ipc_desc *desc) {
  if (a == NULL || desc == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_ipc_revoke: allocator or descriptor is NULL");
  ipc_desc d;
  int st = rapi_ipc_desc_read("rap_ipc_revoke", desc, &d);
  if (st != RAP_OK) return st;
  const rapi_platform_export *e = NULL;
  rapi_ipc_export *x = exporting(a, &e);
  if (x == NULL || d.pid != (int32_t)getpid() || d.pool_id != x->ctl->pool_id)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_revoke('%s'): the descriptor was not exported from "
                     "its memory by this process", a->name);
  ipc_ticket *t = &x->ctl->tickets[d.ticket];
  pthread_mutex_lock(&x->lock);
  uint64_t w = LOAD(&t->word);
  if (tw_serial(w) != d.serial || tw_state(w) == T_FREE || tw_state(w) == T_REVOKED) {
    st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_revoke('%s'): the descriptor is no longer "
                   "exported (revoked already, or its block was freed and passed)", a->name);
  } else if (tw_state(w) != T_SENT || !cas(&t->word, w, tword(d.serial, 0, T_REVOKED))) {
    w = LOAD(&t->word);
    if (tw_serial(w) != d.serial || ended(w) || imported_passed(x, t, w))   /* closed, or left */
      st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_revoke('%s'): the descriptor is no longer "
                     "exported (process %u imported it and closed it, or ended)", a->name, tw_pid(w));
    else
      st = rapi_fail(RAP_ERR_BUSY, "rap_ipc_revoke('%s'): process %u imported the descriptor "
                     "already; the block is held until it closes it (or ends)", a->name, tw_pid(w));
  }
  pthread_mutex_unlock(&x->lock);
  return st;
}
