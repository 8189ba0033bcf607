/* stage.h — copies between a platform's memory and pageable host memory through a ring of a few
 * pinned slots, the host's side done by a few threads (stage.c; the device's ops in vmm_backup.c).
 *
 * The host side of the copies (the backup) is one stream of bytes: the runs packed in order. It is
 * cut into chunks of one slot each; chunk c goes through slot c % slots. Sleep (to_host): the
 * platform copies a chunk's pieces into its slot and marks it; once the mark is reached, threads
 * copy the slot to the backup in parts, prefaulting pages the backup never had. Wake: threads copy
 * a chunk from the backup into its slot; then the platform copies the slot to the runs and marks
 * it. Rules, one line each, with who keeps them:
 *   - a slot is written by the platform only once the threads' copy out of it is done (sleep_loop);
 *   - a slot is written by the threads only once the platform's copy out of it is done (wake_loop);
 *   - the calling thread makes every platform call; the threads only copy host memory (run_part);
 *   - the calling thread takes parts too while it waits, so that no thread at all still works;
 *   - after a failure nothing new starts, what started ends, and every thread is joined.
 */
#ifndef RAP_STAGE_H
#define RAP_STAGE_H

#include "rap_internal.h"

/* The platform's side. queue: n bytes between the platform's memory at dev and slot's host
 * memory at off (to_host: into the slot), queued or done; mark: after a chunk's pieces, the point
 * that wait (on the host) waits for; finish: waits for everything queued (also after a failure).
 * prefault: makes the pages of [p, p+n) of the backup exist, with a sentence where it cannot (NULL:
 * nothing to do). Each returns a status with a sentence (rapi_fail). */
typedef struct rapi_stage_ops {
  int (*queue)(void *ctx, unsigned slot, size_t off, char *dev, size_t n, bool to_host);
  int (*mark)(void *ctx, unsigned slot);
  int (*wait)(void *ctx, unsigned slot);
  int (*finish)(void *ctx);
  int (*prefault)(void *ctx, void *p, size_t n);
} rapi_stage_ops;

typedef struct rapi_stage {
  const rapi_stage_ops *ops;
  void *ctx;
  char *ring;                      /* slots * slot_size bytes of host memory the platform reaches */
  unsigned slots;                  /* at least 1 */
  size_t slot_size, part;          /* a chunk; a thread's piece of one (part divides slot_size) */
  unsigned threads;                /* threads besides the caller (rapi_stage_threads) */
} rapi_stage;

/* Moves the runs between the platform and host (the backup: the runs packed in order), through
 * the ring, asking the host for no more than a few words a slot and the threads; the backup's bytes from touched on are prefaulted as the first copy reaches them.
 * Returns once nothing of it is running any more, with the first failure's status and sentence. */
int rapi_stage_copy(const rapi_stage *sg, char *host, size_t touched, rapi_runs *runs,
                    bool to_host);
/* RAP_SLEEP_THREADS (0..64; default one a CPU the caller may run on besides the caller, at least
 * 8, at most 32): the threads a staged copy starts besides its caller. */
unsigned rapi_stage_threads(void);
unsigned rapi_stage_threads_for(long cpus);   /* the default for cpus usable (-1: unknown) */

#endif /* RAP_STAGE_H */
