/* ipc.h — what the two halves of memory across processes share (private to src/platforms/):
 * ipc.c, the exporter, and ipc_import.c, the importer. The layout of the control block both map
 * (its header, the table of mappings, the tickets), the descriptor's fields, the ticket word and
 * its compare and swap, and the two calls ipc.c lends the importer (reading a descriptor, reading
 * /proc for a process's start time). Both sides of one descriptor must be built from the same
 * version of this file (IPC_VERSION).
 */
#ifndef RAP_PLATFORMS_IPC_H
#define RAP_PLATFORMS_IPC_H

#include "platforms/vmm.h"

#define IPC_MAGIC UINT64_C(0x316370692d706172)   /* "rap-ipc1" */
#define IPC_VERSION 3u   /* 2: StreamOrdered pools, revoked tickets; 3: importers' mappings seen */
#define IPC_TICKETS 4096u
#define IPC_EXTENTS 4096u
#define IPC_MAPPERS 64u  /* importing managers of one platform at once */

/* ---- the shared layout ------------------------------------------------------------------------
 * A ticket's word is serial (bits 40..63) | importer pid (8..39) | state (0..7), changed by
 * compare and swap only, so that a close that comes after the exporter took the ticket back (its
 * pool went) changes nothing. FREE -> SENT (exporter: export) -> CLAIMED (importer: import) ->
 * DONE (close on the host), CLOSING -> DONE (close on a CPU queue: its work sets DONE when the
 * queue reaches it) or EVENT (close on a CUDA stream: an interprocess event recorded there) ->
 * FREE (exporter, once passed). SENT -> REVOKED (exporter: rap_ipc_revoke of a descriptor nobody
 * imported) -> FREE: a later import of it is refused. The exporter marks DONE an EVENT whose event
 * completed and a ticket whose importer is gone; a DONE or REVOKED ticket has ended, and its slot
 * goes to the next export with a new serial even while its block lives on (no importer touches an
 * ended word). */
enum { T_FREE, T_SENT, T_CLAIMED, T_CLOSING, T_EVENT, T_DONE, T_REVOKED };
static inline uint64_t tword(uint64_t serial, uint32_t pid, unsigned state) {
  return serial << 40 | (uint64_t)pid << 8 | state;
}
static inline unsigned tw_state(uint64_t w) { return (unsigned)(w & 0xff); }
static inline uint32_t tw_pid(uint64_t w) { return (uint32_t)(w >> 8); }
static inline uint64_t tw_serial(uint64_t w) { return w >> 40; }

typedef struct ipc_extent {       /* one mapping of the exporter */
  uint64_t serial;                /* 0: no mapping (or held by a sleep: none may map it now);
                                     stored last when added, first when removed */
  uint64_t mappers;               /* importers that map this row now (bits of ctl.mappers): set
                                     before an importer maps it, cleared after it unmapped */
  uint64_t offset, size;          /* from the range's base */
  int32_t fd;                     /* the exporter's descriptor of its memory, or -1 */
  uint32_t pad;
  unsigned char fabric[64];
} ipc_extent;

typedef struct ipc_ticket {
  uint64_t word;
  uint64_t offset, size;          /* the exported block (a pool's: its offset in its allocation) */
  uint64_t start;                 /* the importer's start time (/proc: clock ticks after boot) */
  unsigned char event[64];        /* EVENT: the importer's cudaIpcEventHandle_t */
  uint64_t alloc;                 /* a pool's: the id of the allocation the block lies in */
  unsigned char data[64];         /* a pool's: cudaMemPoolExportPointer's data for it */
} ipc_ticket;

/* An importing manager, so that the exporter can name who maps its memory (a sleep asks): its pid
 * (0: a free slot; taken by compare and swap) and start time. A slot of a process that ended goes
 * to the next importer that finds none free, which clears the ended one's bits first. */
typedef struct ipc_mapper {
  int32_t pid;
  uint32_t pad;
  uint64_t start;
} ipc_mapper;

typedef struct ipc_ctl {
  uint64_t magic, pool_id;
  uint32_t version, kind;
  int32_t pid;
  uint32_t alive;                 /* 0 once the exporting platform went */
  uint64_t reserve, granularity;
  int32_t device;
  uint32_t handle_types;
  uint32_t extents_top;           /* rows below this may be in use */
  int32_t pool_fd;                /* a pool's: the exporter's descriptor of its shareable handle */
  uint32_t sleeps;                /* 1 once a pool over the platform slept or prepared to: an
                                     importer then unmaps a mapping when no block of its own is
                                     open there, instead of keeping it for the next import */
  uint32_t pad;
  char bus_id[32];                /* device: the PCI bus id, which names it in every process */
  ipc_mapper mappers[IPC_MAPPERS];
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

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
static inline bool cas(uint64_t *p, uint64_t from, uint64_t to) {
  return __atomic_compare_exchange_n(p, &from, to, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* ipc.c: a descriptor's fields, checked (who: the call, for the sentence); RAP_ERR_INVALID if it
 * is not one rap_ipc_export made. */
int rapi_ipc_desc_read(const char *who, const rap_ipc_desc *desc, ipc_desc *d);
/* ipc.c: the start time of a process and its state letter, from /proc/PID/stat; false if it is
 * gone. */
bool rapi_ipc_process_info(uint32_t pid, uint64_t *start, char *state);
/* ipc.c: whether process pid still runs and is the one that started at start (0: any). */
bool rapi_ipc_process_alive(uint32_t pid, uint64_t start);
/* ipc.c, for the importer (pid: the exporter's, for the sentence): a slot of c's mappers for an
 * importing manager of this process (start: its start time), free or of a process that ended. */
int  rapi_ipc_mapper_claim(ipc_ctl *c, int32_t pid, uint64_t start, int *slot);
/* ipc.c, for the importer: whether no close of this process on [lo, hi) of the range may still be
 * queued (a CPU queue that has not reached it, a CUDA stream's event not yet seen to pass). */
bool rapi_ipc_quiet(ipc_ctl *c, uint64_t lo, uint64_t hi);

#endif
