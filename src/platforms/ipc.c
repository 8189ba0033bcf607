/* ipc.c — memory across processes: a block of a pool over an exporting platform (HostVmm or
 * DeviceVmm with export=) is described by a small descriptor, opened in another process, and kept
 * out of the exporter's pool until every importer closed it and the work it queued has passed.
 *
 * The exporting platform keeps a control block in shared memory (a memfd): a header, the table of
 * its mappings (each with the file descriptor number of its memory in the exporter) and a table of
 * tickets, one per export, whose state word the importer and the exporter change by compare and
 * swap. An importer opens the control block once per pool (pidfd_getfd), reserves the pool's range
 * once, maps each mapping the first time a block needs it, and serves later blocks from what it
 * mapped. The exporter's pool sees each export as a use of the block on the platform's ipc
 * resource, fenced per block (rapi_resource_ops.use_*): its free keeps the block pending until the
 * ticket says closed and passed, or the importer is gone.
 */
#include "platforms/vmm.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define IPC_MAGIC UINT64_C(0x316370692d706172)   /* "rap-ipc1" */
#define IPC_VERSION 1u
#define IPC_TICKETS 4096u
#define IPC_EXTENTS 4096u
#define DESC_MAGIC 0x43504952u                    /* "RIPC" */
#define NO_SLOT UINT32_MAX

/* ---- the shared layout ------------------------------------------------------------------------
 * A ticket's word is serial (bits 40..63) | importer pid (8..39) | state (0..7), changed by
 * compare and swap only, so that a close that comes after the exporter took the ticket back (its
 * pool went) changes nothing. FREE -> SENT (exporter: export) -> CLAIMED (importer: import) ->
 * DONE (close on the host), CLOSING -> DONE (close on a CPU queue: its work sets DONE when the
 * queue reaches it) or EVENT (close on a CUDA stream: an interprocess event recorded there) ->
 * FREE (exporter, once passed). */
enum { T_FREE, T_SENT, T_CLAIMED, T_CLOSING, T_EVENT, T_DONE };
static inline uint64_t tword(uint64_t serial, uint32_t pid, unsigned state) {
  return serial << 40 | (uint64_t)pid << 8 | state;
}
static inline unsigned tw_state(uint64_t w) { return (unsigned)(w & 0xff); }
static inline uint32_t tw_pid(uint64_t w) { return (uint32_t)(w >> 8); }
static inline uint64_t tw_serial(uint64_t w) { return w >> 40; }

typedef struct ipc_extent {       /* one mapping of the exporter */
  uint64_t serial;                /* 0: no mapping; stored last when added, first when removed */
  uint64_t offset, size;          /* from the range's base */
  int32_t fd;                     /* the exporter's descriptor of its memory, or -1 */
  uint32_t pad;
  unsigned char fabric[64];
} ipc_extent;

typedef struct ipc_ticket {
  uint64_t word;
  uint64_t offset, size;          /* the exported block */
  uint64_t start;                 /* the importer's start time (/proc: clock ticks after boot) */
  unsigned char event[64];        /* EVENT: the importer's cudaIpcEventHandle_t */
} ipc_ticket;

typedef struct ipc_ctl {
  uint64_t magic, pool_id;
  uint32_t version, kind;
  int32_t pid;
  uint32_t alive;                 /* 0 once the exporting platform went */
  uint64_t reserve, granularity;
  int32_t device;
  uint32_t handle_types;
  uint32_t extents_top;           /* rows below this may be in use */
  uint32_t pad;
  char bus_id[32];                /* device: the PCI bus id, which names it in every process */
  ipc_extent extents[IPC_EXTENTS];
  ipc_ticket tickets[IPC_TICKETS];
} ipc_ctl;

/* The descriptor: what rap_ipc_desc holds, checked by a hash of its fields. */
typedef struct ipc_desc {
  uint32_t magic;
  uint16_t version, kind;
  int32_t pid, ctl_fd;
  uint64_t pool_id;
  uint32_t ticket, serial;
  uint64_t offset, size;
  uint64_t check;
  uint64_t pad;
} ipc_desc;
_Static_assert(sizeof(ipc_desc) == sizeof(rap_ipc_desc), "the descriptor fills rap_ipc_desc");

static uint64_t desc_check(const ipc_desc *d) {
  const unsigned char *p = (const unsigned char *)d;
  uint64_t h = UINT64_C(14695981039346656037);
  for (size_t i = 0; i < offsetof(ipc_desc, check); i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
static bool cas(uint64_t *p, uint64_t from, uint64_t to) {
  return __atomic_compare_exchange_n(p, &from, to, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* The start time of a process and its state letter, from /proc/PID/stat; false if it is gone. */
static bool process_info(uint32_t pid, uint64_t *start, char *state) {
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

static bool importer_alive(uint32_t pid, uint64_t start) {
  uint64_t now = 0;
  char state = '?';
  if (pid == 0) return true;
  if (!process_info(pid, &now, &state) || state == 'Z' || state == 'X') return false;
  return start == 0 || now == start;   /* another start time: the pid was reused */
}

/* ---- the exporter ----------------------------------------------------------------------------- */

struct rapi_ipc_export {
  rap_resource r;                 /* the ipc resource: first, so its operations find the rest */
  pthread_mutex_t lock;           /* the tickets' exporter side, the opened events */
  rapi_vmm *v;
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

int rapi_ipc_export_mode(const char *who, const char *text, bool device, int *mode) {
  *mode = 0;
  if (text == NULL || strcmp(text, "none") == 0) return RAP_OK;
  if (strcmp(text, "posix") == 0) *mode = 1;
  else if (device && strcmp(text, "fabric") == 0) *mode = 2;
  else if (device && strcmp(text, "auto") == 0) *mode = 3;
  else
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'export' must be %s, not '%s'", who,
                     device ? "posix, fabric, auto or none" : "posix or none", text);
  return RAP_OK;
}

int rapi_ipc_export_option(rap_allocator *self, rap_options *opts, bool device, int *mode) {
  const char *text = NULL;
  *mode = 0;
  int st = rap_options_get_string(opts, "export", &text);
  if (st != RAP_OK) return st;
  return rapi_ipc_export_mode(rap_allocator_name(self), text, device, mode);
}

static rapi_ipc_export *of_resource(rap_resource *r) { return (rapi_ipc_export *)(void *)r; }

/* A block the pool records on the ipc resource gets a ticket: SENT, with its place and size. */
static int ipc_use_bind(rap_resource *r, void *ptr, size_t bytes, uint64_t *token) {
  rapi_ipc_export *x = of_resource(r);
  rapi_vmm *v = x->v;
  if ((char *)ptr < v->base || (char *)ptr >= v->base + v->reserve)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_export: %p is not in the range of '%s'", ptr,
                     rap_allocator_name(v->self));
  pthread_mutex_lock(&x->lock);
  int st = RAP_ERR_NOMEM;
  for (unsigned n = 0; n < IPC_TICKETS; n++) {
    unsigned i = (x->next_ticket + n) % IPC_TICKETS;
    ipc_ticket *t = &x->ctl->tickets[i];
    uint64_t w = LOAD(&t->word);
    if (tw_state(w) != T_FREE) continue;
    uint64_t serial = (tw_serial(w) + 1) & 0xffffff;
    if (serial == 0) serial = 1;
    t->offset = (uint64_t)((char *)ptr - v->base);
    t->size = bytes;
    t->start = 0;
    STORE(&t->word, tword(serial, 0, T_SENT));
    x->next_ticket = (i + 1) % IPC_TICKETS;
    *token = serial << 32 | i;
    bound_token = *token;
    bound_by = x;
    st = RAP_OK;
    break;
  }
  pthread_mutex_unlock(&x->lock);
  if (st != RAP_OK)
    return rapi_fail(st, "rap_ipc_export: '%s' has %u exports open (every one until its importer "
                     "closed it), its most", rap_allocator_name(v->self), IPC_TICKETS);
  return RAP_OK;
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
  if (!importer_alive(pid, start)) return false;
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd < 0) return errno != ESRCH;
  if (!importer_alive(pid, start)) {   /* the pid was reused before the pidfd was opened */
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

/* Passed: closed on the host, closed on a queue that reached the close, closed on a CUDA stream
 * whose event completed, or the importer (or the one who would import it) is gone. */
static int ipc_use_passed(rap_resource *r, uint64_t token) {
  rapi_ipc_export *x = of_resource(r);
  unsigned i = (unsigned)(token & 0xffffffff);
  ipc_ticket *t = &x->ctl->tickets[i];
  uint64_t w = LOAD(&t->word);
  if (tw_serial(w) != token >> 32) return 1;   /* taken back already */
  switch (tw_state(w)) {
  case T_DONE: return 1;
  case T_SENT: return 0;   /* not imported yet: the descriptor may be on its way */
  case T_EVENT: {
    pthread_mutex_lock(&x->lock);
    opened *o = x->opened;
    while (o != NULL && memcmp(o->handle, t->event, sizeof o->handle) != 0) o = o->next;
    int q = RAP_ERR_NOMEM;
    if (o == NULL && (o = rapi_calloc(1, sizeof *o)) != NULL) {
      memcpy(o->handle, t->event, sizeof o->handle);
      if ((q = rapi_ipc_event_query(o->handle, &o->event)) < 0 && o->event == NULL) {
        free(o);
        o = NULL;
      } else {
        o->next = x->opened;
        x->opened = o;
      }
    } else if (o != NULL) {
      q = rapi_ipc_event_query(o->handle, &o->event);
    }
    pthread_mutex_unlock(&x->lock);
    if (q == 1) return 1;
    if (q < 0)
      rap_log(RAP_LOG_DEBUG, "%s: querying an importer's event: %s", rap_allocator_name(x->v->self),
              rap_last_error());
    break;
  }
  default: break;
  }
  pthread_mutex_lock(&x->lock);
  bool alive = watched_alive(x, tw_pid(w), LOAD(&t->start));
  pthread_mutex_unlock(&x->lock);
  if (alive) return 0;
  rap_log(RAP_LOG_INFO, "%s: importer process %u ended without closing a block of %llu bytes at "
          "offset %llu: it goes back to the pool", rap_allocator_name(x->v->self), tw_pid(w),
          (unsigned long long)t->size, (unsigned long long)t->offset);
  return 1;
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

int rapi_ipc_export_start(rapi_vmm *v, int kind) {
  const char *who = rap_allocator_name(v->self);
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
  c->reserve = v->reserve;
  c->granularity = v->granularity;
  c->device = v->device;
  c->handle_types = v->handle_types;
  if (kind == RAPI_IPC_DEVICE) {
    int st = rapi_ipc_device_bus_id(v->device, c->bus_id, sizeof c->bus_id);
    if (st != RAP_OK) {
      munmap(x->ctl, sizeof(ipc_ctl));
      close(x->ctl_fd);
      free(x);
      return st;
    }
  }
  for (unsigned i = 0; i < IPC_EXTENTS; i++) c->extents[i].fd = -1;
  c->alive = 1;
  STORE(&c->magic, IPC_MAGIC);
  pthread_mutex_init(&x->lock, NULL);
  x->v = v;
  x->r.ops = &ipc_ops;
  x->r.rm = v->self->rm;
  x->r.key = (uintptr_t)&x->r;
  rapi_event_pool_init(&x->r);
  x->r.id = 0;   /* not in the manager's list (made under its lock): the platform owns it */
  v->ipc = x;
  return RAP_OK;
}

/* From now on importers are refused; what they mapped stays theirs until they close it. */
void rapi_ipc_export_stop(rapi_vmm *v) {
  rapi_ipc_export *x = v->ipc;
  if (x == NULL) return;
  STORE(&x->ctl->alive, 0);
  for (unsigned i = 0; i < x->nwatch; i++) close(x->watch[i].pidfd);
  while (x->opened != NULL) {
    opened *o = x->opened;
    x->opened = o->next;
    rapi_ipc_event_close(o->event);
    free(o);
  }
  munmap(x->ctl, sizeof(ipc_ctl));
  close(x->ctl_fd);
  pthread_mutex_destroy(&x->lock);
  pthread_mutex_destroy(&x->r.event_lock);
  free(x);
  v->ipc = NULL;
}

int rapi_ipc_extent_add(rapi_vmm *v, rapi_vmm_extent *e) {
  ipc_ctl *c = v->ipc->ctl;
  for (unsigned i = 0; i < IPC_EXTENTS; i++) {
    if (LOAD(&c->extents[i].serial) != 0) continue;
    ipc_extent *x = &c->extents[i];
    x->offset = (uint64_t)(e->addr - v->base);
    x->size = e->size;
    x->fd = e->share.fd;
    memcpy(x->fabric, e->share.fabric, sizeof x->fabric);
    if (i + 1 > LOAD(&c->extents_top)) STORE(&c->extents_top, i + 1);
    STORE(&x->serial, ++v->ipc->next_serial);
    e->share.slot = i;
    return RAP_OK;
  }
  return rapi_fail(RAP_ERR_NOMEM, "%s: an exporting platform holds at most %u mappings; a larger "
                   "granularity= or next_size= makes fewer", rap_allocator_name(v->self), IPC_EXTENTS);
}

void rapi_ipc_extent_remove(rapi_vmm *v, rapi_vmm_extent *e) {
  if (e->share.slot == NO_SLOT) return;
  STORE(&v->ipc->ctl->extents[e->share.slot].serial, 0);
  e->share.slot = NO_SLOT;
}

/* ---- export --------------------------------------------------------------------------------- */

static rapi_vmm *exporting_vmm(rap_allocator *root) {
  return root->platform != NULL ? root->platform->vmm : NULL;
}

int rap_ipc_export(rap_allocator *a, void *ptr, rap_ipc_desc *out) {
  if (a == NULL || out == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_ipc_export: allocator or out is NULL");
  if (ptr == NULL) return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_ipc_export('%s'): pointer is NULL", a->name);
  rap_allocator *root = a;
  while (root->parent != NULL) root = root->parent;
  rapi_vmm *v = exporting_vmm(root);
  if (v == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): its memory comes from '%s' (%s), "
                     "which no other process can open; make the pool over DeviceVmm(export=posix) "
                     "or HostVmm(export=posix)", a->name, root->name, root->strategy->name);
  if (v->ipc == NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): '%s' was made without export=; "
                     "%s(export=posix) makes memory other processes can open", a->name, root->name,
                     root->strategy->name);
  if (a == root)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): export a block of a "
                     "ResourceAwarePool over it, whose free keeps the block until its importers "
                     "closed it", a->name);
  bound_by = NULL;
  int st = rap_record_resource(a, ptr, &v->ipc->r);
  if (st == RAP_ERR_UNSUPPORTED)
    return rapi_fail(st, "rap_ipc_export('%s'): its chain keeps no per-stream lifetime for blocks "
                     "(%s); export needs a ResourceAwarePool (under ThreadSafe or ThreadCache at "
                     "most) over the exporting platform", a->name, rap_last_error());
  if (st != RAP_OK) return st;
  if (bound_by != v->ipc)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_export('%s'): no ResourceAwarePool in its chain "
                     "took the export", a->name);
  unsigned i = (unsigned)(bound_token & 0xffffffff);
  const ipc_ticket *t = &v->ipc->ctl->tickets[i];
  ipc_desc d;
  memset(&d, 0, sizeof d);
  d.magic = DESC_MAGIC;
  d.version = IPC_VERSION;
  d.kind = (uint16_t)v->ipc->ctl->kind;
  d.pid = (int32_t)getpid();
  d.ctl_fd = v->ipc->ctl_fd;
  d.pool_id = v->ipc->ctl->pool_id;
  d.ticket = i;
  d.serial = (uint32_t)(bound_token >> 32);
  d.offset = t->offset;
  d.size = t->size;
  d.check = desc_check(&d);
  memcpy(out, &d, sizeof d);
  return RAP_OK;
}

/* ---- the importer ------------------------------------------------------------------------------ */

typedef struct imp_extent {       /* one row of the exporter's table, as mapped here */
  uint64_t serial;                /* 0: nothing mapped here for this row */
  uint64_t offset, size;
  unsigned refs;                  /* open blocks that use it */
} imp_extent;

typedef struct imp_event {        /* an interprocess event this process recorded for a close */
  void *event;
  unsigned char handle[64];
  unsigned ticket;
  uint64_t word;                  /* the ticket's word it was recorded for */
  struct imp_event *next;
} imp_event;

typedef struct imp_pool {
  uint64_t pool_id;
  int32_t pid;
  int pidfd;
  ipc_ctl *ctl;                   /* the exporter's control block, mapped here */
  uint32_t kind;
  int device;                     /* device kind: the device here */
  char *base, *raw;               /* the range reserved here (raw: host, with slack) */
  size_t reserve, raw_size;
  imp_extent *rows;               /* IPC_EXTENTS */
  imp_event *events;
  struct imp_pool *next;
} imp_pool;

typedef struct imp_ticket {
  unsigned ticket;
  uint64_t word;                  /* CLAIMED by this process */
  rap_resource *r;                /* given at import: a close without one closes there */
  struct imp_ticket *next;
} imp_ticket;

typedef struct imp_block {
  void *ptr;                      /* key */
  imp_pool *pool;
  imp_ticket *tickets;            /* one per import of the block still open */
  unsigned *rows, nrows;
  UT_hash_handle hh;
} imp_block;

struct rapi_ipc_importer {
  pthread_mutex_t lock;
  imp_pool *pools;
  imp_block *blocks;
};

static pthread_mutex_t importer_make_lock = PTHREAD_MUTEX_INITIALIZER;

static struct rapi_ipc_importer *importer(rap_manager *rm) {
  pthread_mutex_lock(&importer_make_lock);
  if (rm->ipc == NULL) {
    struct rapi_ipc_importer *im = rapi_calloc(1, sizeof *im);
    if (im != NULL) pthread_mutex_init(&im->lock, NULL);
    rm->ipc = im;
  }
  pthread_mutex_unlock(&importer_make_lock);
  return rm->ipc;
}

/* This process's start time, read once per process (a forked child reads its own). */
static uint64_t my_start(void) {
  static _Atomic uint64_t cached_pid_start[2];
  uint64_t pid = (uint64_t)getpid(), start = 0;
  if (cached_pid_start[0] == pid) return cached_pid_start[1];
  char state;
  if (!process_info((uint32_t)pid, &start, &state)) return 0;
  cached_pid_start[1] = start;
  cached_pid_start[0] = pid;
  return start;
}

static int pidfd_open_(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }
static int pidfd_getfd_(int pidfd, int fd) { return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0); }

static int getfd_fail(int err, int32_t pid, const char *what) {
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
                     "from process %d (its %s is closed)", pid, what);
  return rapi_fail(RAP_ERR_BACKEND, "rap_ipc_import: pidfd_getfd on process %d (%s): %s", pid, what,
                   strerror(err));
}

static void pool_free(imp_pool *p) {
  if (p->rows != NULL && p->base != NULL)
    for (unsigned i = 0; i < IPC_EXTENTS; i++) {
      imp_extent *e = &p->rows[i];
      if (e->serial == 0) continue;
      if (p->kind == RAPI_IPC_DEVICE) (void)rapi_ipc_device_unmap(p->base + e->offset, e->size);
      else (void)mmap(p->base + e->offset, e->size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    }
  if (p->base != NULL) {
    if (p->kind == RAPI_IPC_DEVICE) rapi_ipc_device_unreserve(p->base, p->reserve);
    else munmap(p->raw, p->raw_size);
  }
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
  p->pid = d->pid;
  p->pool_id = d->pool_id;
  int st = RAP_OK;
  if ((p->rows = rapi_calloc(IPC_EXTENTS, sizeof *p->rows)) == NULL) {
    st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  } else if ((p->pidfd = pidfd_open_(d->pid)) < 0) {
    int err = errno;
    st = err == ESRCH ? rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporting process %d "
                                  "is gone", d->pid)
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
    if (p->kind == RAPI_IPC_DEVICE) {
      char bus[33];
      memcpy(bus, p->ctl->bus_id, 32);
      bus[32] = '\0';
      st = rapi_ipc_device_by_bus_id(bus, &p->device);
      if (st == RAP_OK) st = rapi_ipc_device_reserve(p->device, p->reserve, p->ctl->granularity, &p->base);
    } else {
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
    pool_free(p);
    return st;
  }
  *out = p;
  return RAP_OK;
}

/* Maps row i of the exporter's table here (serial: what the row said when read). */
static int row_map(imp_pool *p, unsigned i, uint64_t serial) {
  ipc_extent *x = &p->ctl->extents[i];
  uint64_t off = x->offset, size = x->size;
  int32_t xfd = x->fd;
  if (off > p->reserve || size > p->reserve - off)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the exporter's table is corrupt");
  int fd = -1, st = RAP_OK;
  if (xfd >= 0 && (fd = pidfd_getfd_(p->pidfd, xfd)) < 0) return getfd_fail(errno, p->pid, "a mapping");
  char *addr = p->base + off;
  if (p->kind == RAPI_IPC_DEVICE) {
    st = rapi_ipc_device_map(p->device, addr, size, fd, fd < 0 ? x->fabric : NULL);
  } else if (fd < 0 || mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
                           MAP_FAILED) {
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
  p->rows[i] = (imp_extent){serial, off, size, 0};
  return RAP_OK;
}

/* A row mapped here that the exporter gave back, used by no open block: unmapped now. Its last
 * block's close passed before the exporter let it go, so nothing queued here touches it. */
static void row_settle(imp_pool *p, unsigned i) {
  imp_extent *e = &p->rows[i];
  if (e->serial == 0 || e->refs > 0 || LOAD(&p->ctl->extents[i].serial) == e->serial) return;
  if (p->kind == RAPI_IPC_DEVICE) (void)rapi_ipc_device_unmap(p->base + e->offset, e->size);
  else (void)mmap(p->base + e->offset, e->size, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  e->serial = 0;
}

/* Every row that covers [off, off+size) mapped here and counted for the block. */
static int rows_take(imp_pool *p, uint64_t off, uint64_t size, unsigned **rows, unsigned *n) {
  uint64_t end = off + (size ? size : 1), covered = 0;
  unsigned top = LOAD(&p->ctl->extents_top), cap = 4, k = 0;
  unsigned *got = rapi_malloc(cap * sizeof *got);
  int st = got ? RAP_OK : rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  for (unsigned i = 0; i < top && i < IPC_EXTENTS && st == RAP_OK; i++) {
    uint64_t serial = LOAD(&p->ctl->extents[i].serial);
    if (serial == 0) continue;
    uint64_t xo = p->ctl->extents[i].offset, xs = p->ctl->extents[i].size;
    if (xo >= end || xo + xs <= off) continue;
    if (p->rows[i].serial != serial) {
      row_settle(p, i);
      if (p->rows[i].serial != 0) {
        st = rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: the exporter mapped new memory where a "
                       "block still open here lies; close it first");
        break;
      }
      if ((st = row_map(p, i, serial)) != RAP_OK) break;
    }
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
    st = rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the exporter no longer maps the block");
  if (st != RAP_OK) {
    for (unsigned j = 0; j < k; j++) {
      p->rows[got[j]].refs--;
      row_settle(p, got[j]);
    }
    free(got);
    return st;
  }
  *rows = got;
  *n = k;
  return RAP_OK;
}

static int claim(imp_pool *p, const ipc_desc *d, uint64_t *claimed) {
  if (!LOAD(&p->ctl->alive))
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the pool this descriptor names was "
                     "destroyed in process %d", d->pid);
  ipc_ticket *t = &p->ctl->tickets[d->ticket];
  uint64_t w = LOAD(&t->word);
  if (tw_serial(w) != d->serial || tw_state(w) == T_FREE)
    return rapi_fail(RAP_ERR_NOT_FOUND, "rap_ipc_import: the block this descriptor names is no "
                     "longer exported by process %d (freed there, or a stale descriptor)", d->pid);
  if (tw_state(w) != T_SENT)
    return rapi_fail(RAP_ERR_BUSY, "rap_ipc_import: this descriptor was imported already (by "
                     "process %u); each importer needs a descriptor of its own (rap_ipc_export "
                     "again)", tw_pid(w));
  if (t->offset != d->offset || t->size != d->size)
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

int rap_ipc_import(rap_manager *rm, const rap_ipc_desc *desc, rap_resource *r, void **out) {
  if (rm == NULL || desc == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: manager, descriptor or out is NULL");
  if (r != NULL && r->rm != rm)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the resource belongs to another manager");
  ipc_desc d;
  memcpy(&d, desc, sizeof d);
  if (d.magic != DESC_MAGIC || d.version != IPC_VERSION || d.check != desc_check(&d) ||
      d.ticket >= IPC_TICKETS || (d.kind != RAPI_IPC_HOST && d.kind != RAPI_IPC_DEVICE))
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: not a descriptor rap_ipc_export made "
                     "(truncated, forged or corrupted: its check does not match)");
  if (d.pid == (int32_t)getpid())
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_import: the block was exported by this process "
                     "(pid %d); use its pointer here: import is for other processes", d.pid);
  struct rapi_ipc_importer *im = importer(rm);
  if (im == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  rapi_held held;
  rapi_lock(&im->lock, &held);
  imp_pool *p = im->pools;
  while (p != NULL && (p->pid != d.pid || p->pool_id != d.pool_id)) p = p->next;
  int st = RAP_OK;
  if (p == NULL && (st = pool_open(&d, &p)) == RAP_OK) {
    p->next = im->pools;
    im->pools = p;
  }
  uint64_t claimed = 0;
  if (st == RAP_OK) st = claim(p, &d, &claimed);
  imp_block *b = NULL;
  imp_ticket *tk = NULL;
  void *ptr = st == RAP_OK ? p->base + d.offset : NULL;
  if (st == RAP_OK) {
    tk = rapi_calloc(1, sizeof *tk);
    HASH_FIND_PTR(im->blocks, &ptr, b);
    if (tk == NULL) st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
  }
  if (st == RAP_OK && b == NULL) {
    imp_block *nb = rapi_calloc(1, sizeof *nb);
    if (nb == NULL) st = rapi_fail(RAP_ERR_NOMEM, "rap_ipc_import: out of host memory");
    if (st == RAP_OK) st = rows_take(p, d.offset, d.size, &nb->rows, &nb->nrows);
    bool added = false;
    if (st == RAP_OK) {
      nb->ptr = ptr;
      nb->pool = p;
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
    if (claimed != 0) unclaim(p, d.ticket, claimed);
  }
  rapi_unlock(&held);
  return st;
}

/* ---- close ------------------------------------------------------------------------------------- */

typedef struct close_job {
  uint64_t *word;
  uint64_t from, to;
} close_job;

static void close_on_queue(void *arg) {
  close_job *j = arg;
  (void)cas(j->word, j->from, j->to);
  free(j);
}

/* Tells the exporter the block is closed, in r's order: at once on the host, by an interprocess
 * event on a CUDA stream (device memory), else by a job queued on r (a CPU queue; a stream's host
 * function for host memory, which kernels do not reach). */
static int signal_close(imp_pool *p, imp_ticket *tk, rap_resource *r) {
  ipc_ticket *t = &p->ctl->tickets[tk->ticket];
  uint64_t serial = tw_serial(tk->word);
  uint32_t pid = tw_pid(tk->word);
  if (r == NULL || r->ops->record == NULL) {
    (void)cas(&t->word, tk->word, tword(serial, pid, T_DONE));
    return RAP_OK;
  }
  if (p->kind == RAPI_IPC_DEVICE && strcmp(r->ops->kind, "cuda") == 0) {
    imp_event *e = p->events;   /* one whose ticket moved on may be recorded again */
    while (e != NULL && LOAD(&p->ctl->tickets[e->ticket].word) == e->word) e = e->next;
    bool made = e == NULL;
    if (made && (e = rapi_calloc(1, sizeof *e)) == NULL)
      return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_close: out of host memory");
    int st = rapi_ipc_event_record(r, e->handle, &e->event);
    if (st != RAP_OK) {
      if (made) free(e);
      return st;
    }
    e->ticket = tk->ticket;
    e->word = tword(serial, pid, T_EVENT);
    if (made) {
      e->next = p->events;
      p->events = e;
    }
    memcpy(t->event, e->handle, sizeof t->event);
    (void)cas(&t->word, tk->word, e->word);
    return RAP_OK;
  }
  close_job *j = rapi_malloc(sizeof *j);
  if (j == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_close: out of host memory");
  *j = (close_job){&t->word, tword(serial, pid, T_CLOSING), tword(serial, pid, T_DONE)};
  if (!cas(&t->word, tk->word, j->from)) {   /* the exporter took it back: nothing to tell */
    free(j);
    return RAP_OK;
  }
  int st = rap_resource_submit(r, close_on_queue, j);
  if (st != RAP_OK) {
    free(j);
    (void)cas(&t->word, tword(serial, pid, T_CLOSING), tk->word);
  }
  return st;
}

static void block_forget(struct rapi_ipc_importer *im, imp_block *b) {
  for (unsigned j = 0; j < b->nrows; j++) {
    b->pool->rows[b->rows[j]].refs--;
    row_settle(b->pool, b->rows[j]);
  }
  HASH_DEL(im->blocks, b);
  free(b->rows);
  free(b);
}

int rap_ipc_close(rap_manager *rm, void *ptr, rap_resource *r) {
  if (rm == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_ipc_close: manager is NULL");
  if (r != NULL && r->rm != rm)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_close: the resource belongs to another manager");
  struct rapi_ipc_importer *im = rm->ipc;
  imp_block *b = NULL;
  rapi_held held;
  if (im != NULL) {
    rapi_lock(&im->lock, &held);
    HASH_FIND_PTR(im->blocks, &ptr, b);
  }
  if (b == NULL) {
    if (im != NULL) rapi_unlock(&held);
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_ipc_close: %p is not a block this manager "
                     "imported, or it was closed already", ptr);
  }
  imp_ticket *tk = b->tickets;
  int st = signal_close(b->pool, tk, r != NULL ? r : tk->r);
  if (st == RAP_OK) {
    b->tickets = tk->next;
    free(tk);
    if (b->tickets == NULL) block_forget(im, b);
  }
  rapi_unlock(&held);
  return st;
}

/* The manager goes, its resources synchronized: what is still open here is closed (its work has
 * passed), events are waited for and the exporter told, and every pool is let go. */
void rapi_ipc_manager_fini(rap_manager *rm) {
  struct rapi_ipc_importer *im = rm->ipc;
  if (im == NULL) return;
  imp_block *b, *tmp;
  HASH_ITER(hh, im->blocks, b, tmp) {
    if (b->tickets != NULL)
      rap_log(RAP_LOG_WARN, "rap_manager_destroy: an imported block at %p was not closed; closed "
              "now", b->ptr);
    while (b->tickets != NULL) {
      imp_ticket *tk = b->tickets;
      (void)signal_close(b->pool, tk, NULL);
      b->tickets = tk->next;
      free(tk);
    }
    block_forget(im, b);
  }
  while (im->pools != NULL) {
    imp_pool *p = im->pools;
    im->pools = p->next;
    while (p->events != NULL) {
      imp_event *e = p->events;
      p->events = e->next;
      ipc_ticket *t = &p->ctl->tickets[e->ticket];
      if (rapi_ipc_event_synchronize(e->event) == RAP_OK)
        (void)cas(&t->word, e->word, tword(tw_serial(e->word), tw_pid(e->word), T_DONE));
      rapi_ipc_event_destroy(e->event);
      free(e);
    }
    pool_free(p);
  }
  pthread_mutex_destroy(&im->lock);
  free(im);
  rm->ipc = NULL;
}
