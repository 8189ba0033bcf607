/* resizable.h — the contract a growable parent (platforms/vmm.c and its backends: HOST_VMM,
 * DEVICE_VMM) offers the pools over it: resizing an allocation in place, sleep's suspend, resume,
 * backup and copies, the hold of an exported allocation, and pieces inside a live allocation.
 * Included by rap_internal.h, where rap_allocator is declared.
 */
#ifndef RAPI_CORE_RESIZABLE_H
#define RAPI_CORE_RESIZABLE_H

#include <rap/strategy.h>
#include <stdbool.h>
#include <stddef.h>

/* The contract of a growable parent (platforms/vmm.c: HOST_VMM, DEVICE_VMM): every allocation it
 * hands out is granularity-aligned, and a live one can be resized in place. resize grows or
 * shrinks the allocation ptr, now *bytes long, towards want (rounded up to the granularity):
 * growing maps the addresses right after it, if they are free, or fails with RAP_ERR_NOMEM and
 * changes nothing; shrinking gives back only whole mappings above want, so the new size may stay
 * above it; *bytes becomes the new size. A pool whose direct parent sets this grows its newest
 * chunk at its end, so new space merges with the free space before it, and gives free tail pages
 * back by range (block_pool.c). */
/* Host memory that holds a sleeping pool's live bytes (rapi_resizable.backup_reserve): plain
 * (HOST_VMM: malloc), pinned (DEVICE_VMM after RAP_SLEEP_PREPARE: the copies go straight into it)
 * or pageable (DEVICE_VMM otherwise: an mmap the copies reach through the platform's pinned ring,
 * platforms/vmm_backup.c). touched: the bytes from host on whose pages exist (a pageable backup
 * is prefaulted as the first copy into it goes). */
typedef enum rapi_backup_kind { RAPI_BACKUP_PLAIN = 0, RAPI_BACKUP_PINNED, RAPI_BACKUP_PAGEABLE } rapi_backup_kind;
typedef struct rapi_backup {
  void *host;
  size_t cap, touched;
  rapi_backup_kind kind;
} rapi_backup;
enum { RAPI_UNHOLD, RAPI_HOLD, RAPI_HOLD_NOTICE };   /* rapi_resizable.hold */
enum { RAPI_PIECES_MAPPED, RAPI_PIECES_UNMAPPED, RAPI_PIECES_MEETING };   /* rapi_resizable.pieces */
/* A run of touching used blocks of a sleeping pool: the runs lie packed, in order, in the backup.
 * A copy walks them with next (false after the last); total is their bytes; at is the walker's. */
typedef struct rapi_run {
  char *ptr;
  size_t size;
} rapi_run;
typedef struct rapi_runs {
  size_t total;
  bool (*next)(struct rapi_runs *runs, rapi_run *out);
  void *at[2];
} rapi_runs;
typedef struct rapi_resizable {
  size_t granularity;
  int (*resize)(rap_allocator *a, void *ptr, size_t *bytes, size_t want);
  /* Waits until no queued work can touch memory about to go back (the device backend: a device
   * synchronize, as cudaFree makes one), or NULL. Pools whose free blocks are fenced by events
   * (the ResourceAwarePool) never call it; those that track no resources call it first. */
  void (*sync_before_unmap)(rap_allocator *a);
  /* Sleep and wake (pool/sleep.c). suspend gives back the memory of the live allocation ptr and
   * keeps its addresses reserved for it; resume maps them again (contents undefined), all or
   * nothing; both skip what is already so. backup_reserve makes bk hold at least bytes of host
   * memory the platform copies to and from at full speed (HOST_VMM: malloc; DEVICE_VMM: pinned
   * where pinned is asked (RAP_SLEEP_PREPARE), else pageable, reached through its pinned ring),
   * kept for the next sleep; backup_free gives it back. copy moves the runs (to_host: from the
   * platform's memory into bk, packed in order from bk->host; else back), asking no host memory,
   * and returns once they are done. All NULL on a platform that cannot sleep. */
  int  (*suspend)(rap_allocator *a, void *ptr);
  int  (*resume)(rap_allocator *a, void *ptr);
  int  (*backup_reserve)(rap_allocator *a, rapi_backup *bk, size_t bytes, bool pinned);
  void (*backup_free)(rap_allocator *a, rapi_backup *bk);
  int  (*copy)(rap_allocator *a, rapi_backup *bk, rapi_runs *runs, bool to_host);
  /* A platform whose memory other processes may map (export=): RAPI_HOLD takes the live
   * allocation ptr out of the table importers read, so that none maps it from now, and answers
   * RAP_ERR_BUSY with a sentence (changing nothing) while another process maps some of it;
   * RAPI_UNHOLD publishes it again (a sleep that did not happen, a wake that is done);
   * RAPI_HOLD_NOTICE (ptr NULL) tells importers that pools here sleep. OK where nothing exports. */
  int  (*hold)(rap_allocator *a, void *ptr, int how);
  /* Pages inside a live allocation (docs/DESIGN.md, "Free pages inside a chunk"). A piece is one
   * mapping: a platform made with piece= maps growth in pieces at multiples of `piece`; one made
   * without it (piece 0) has the mappings its growth made, where only it knows (pieces).
   * unmap_inside gives back every mapped piece wholly inside [lo, hi) (observers of the platform
   * told first; on an exporting platform not one another process maps), stopping at the first
   * failure; map_inside maps again every unmapped piece that meets [lo, hi), all or nothing; both
   * add the bytes they changed to *bytes. unmapped_inside counts the unmapped bytes of pieces that
   * meet [lo, hi); pieces narrows [*lo, *hi) to the span of the pieces wholly inside it that are
   * mapped (RAPI_PIECES_MAPPED) or not (RAPI_PIECES_UNMAPPED), or widens it to every piece that
   * meets it (RAPI_PIECES_MEETING), and says whether there is one. */
  size_t piece;
  int  (*unmap_inside)(rap_allocator *a, void *lo, void *hi, size_t *bytes);
  int  (*map_inside)(rap_allocator *a, void *lo, void *hi, size_t *bytes);
  size_t (*unmapped_inside)(rap_allocator *a, void *lo, void *hi);
  bool (*pieces)(rap_allocator *a, char **lo, char **hi, int how);
} rapi_resizable;

#endif
