/* stress.h — the execution backends of the stress program: where blocks are written and checked.
 *
 * The host backend (stress.c) runs fill and check jobs on host_async queues; the CUDA backend
 * (stress_cuda.cu) launches fill and check kernels on CUDA streams. A block is written with its
 * owner's byte and a tag (its first 8 bytes: the tag twice); a check that finds anything else
 * counts an error, so a block handed to two owners, or handed out while a queue still uses it, shows.
 */
#ifndef RAP_STRESS_H
#define RAP_STRESS_H

#include <rap/rap.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct stress_backend {
  const char *name;
  /* Makes n resources; 0, or a reason to skip (no device) in *why. */
  int  (*init)(rap_manager *rm, rap_resource **res, int n, const char **why);
  /* Enqueued on r, in r's order. */
  int  (*fill)(rap_resource *r, void *p, size_t n, uint32_t tag, unsigned char byte);
  int  (*check)(rap_resource *r, const void *p, size_t n, uint32_t tag, unsigned char byte);
  /* A check on reader that runs only after everything queued on writer so far. */
  int  (*check_after)(rap_resource *reader, rap_resource *writer, const void *p, size_t n, uint32_t tag,
                      unsigned char byte);
  int  (*lag)(rap_resource *r);          /* some slow work, so that queues fall behind */
  unsigned long long (*errors)(void);   /* checks that failed so far (after synchronizing) */
  void (*fini)(void);
} stress_backend;

extern const stress_backend stress_cuda_backend;   /* stress_cuda.cu, in CUDA builds */

#ifdef __cplusplus
}
#endif
#endif /* RAP_STRESS_H */
