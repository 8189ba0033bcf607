/* ipc_import.h — the importer's state (ipc_import.c), shared with its close (ipc_close.c): a pool
 * opened here, its rows as mapped here, the allocations of a StreamOrdered pool imported here, the
 * tickets and blocks open here, and the calls a close makes of the import's side.
 */
#ifndef RAPI_IPC_IMPORT_H
#define RAPI_IPC_IMPORT_H

#include "platforms/ipc.h"

typedef struct imp_extent {       /* one row of the exporter's table, as mapped here */
  uint64_t serial;                /* 0: nothing mapped here for this row */
  uint64_t offset, size;
  unsigned refs;                  /* open blocks that use it */
  uint64_t users;                 /* device: other devices given access to it here (bits) */
} imp_extent;

typedef struct imp_event {        /* an interprocess event this process recorded for a close */
  void *event;
  unsigned char handle[64];
  unsigned ticket;
  uint64_t word;                  /* the ticket's word it was recorded for */
  struct imp_event *next;
} imp_event;

/* A pool's allocation imported here (cudaMemPoolImportPointer) while blocks of it are open: freed
 * at the close of its last one, after the work of the earlier closes (notes: their events). */
typedef struct imp_note {
  unsigned ticket;
  uint64_t word;                  /* the ticket's word when its event was recorded */
  imp_event *e;
} imp_note;

typedef struct imp_alloc {
  uint64_t id;                    /* the exporter's id of the allocation */
  char *ptr;                      /* imported here */
  unsigned refs;                  /* open imports of blocks in it */
  imp_note *notes;
  unsigned nnotes, cap;
  struct imp_alloc *next;
} imp_alloc;

typedef struct imp_pool {
  uint64_t pool_id;
  int32_t pid;
  int32_t ctl_fd;                 /* the exporter's descriptor number of the control block */
  int pidfd;
  ipc_ctl *ctl;                   /* the exporter's control block, mapped here */
  uint32_t kind;
  int device;                     /* device kind: the device here */
  char *base, *raw;               /* the range reserved here (raw: host, with slack) */
  size_t reserve, raw_size;
  imp_extent *rows;               /* IPC_EXTENTS */
  imp_event *events;
  void *mempool;                  /* a pool's: the exporter's pool imported here */
  uint64_t granted;               /* a pool's: other devices given access to it here (bits) */
  uint64_t reach;                 /* device: other devices found able to access its memory (bits) */
  imp_alloc *allocs;              /* a pool's: its allocations imported here */
  int slot;                       /* its row in the exporter's mappers (a range's), or -1 */
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
  imp_alloc *alloc;               /* a pool's block: the allocation it lies in */
  UT_hash_handle hh;
} imp_block;

struct rapi_ipc_importer {
  pthread_mutex_t lock;
  imp_pool *pools;
  imp_block *blocks;
};

extern pthread_mutex_t rapi_imp_make_lock;   /* making a manager's importer, and reading it */

void rapi_imp_row_let_go(imp_pool *p, unsigned i);   /* a row no open block uses any more */
void rapi_imp_rows_sweep(imp_pool *p);                /* lets go every row nothing uses */
void rapi_imp_pool_free(imp_pool *p);
void rapi_imp_alloc_drop(imp_pool *p, imp_alloc *a);
int  rapi_imp_alloc_free(imp_pool *p, imp_alloc *a, rap_resource *r);
int  rapi_imp_alloc_note(imp_pool *p, imp_alloc *a, unsigned ticket, uint64_t word, imp_event *e);

#endif
