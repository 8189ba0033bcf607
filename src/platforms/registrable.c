/* registrable.c — rap_allocator_registrable: whether NCCL can register an allocator's memory
 * (rap_pointer_registrable, in manager.c, finds the pointer's allocator and asks the same).
 *
 * NCCL's user-buffer and window registration take memory made as ncclMemAlloc makes it: CUDA
 * virtual memory with shareable (POSIX file descriptor, or fabric) handles. In rap that is a
 * DeviceVmm made with export= at the bottom of the pointer's chain (docs/DESIGN.md, "Memory across
 * processes"); anything else gets a sentence naming what the memory is and the spec to use.
 */
#include "rap_internal.h"
#include "platforms/vmm.h"

#include <stdio.h>

/* What a's memory is, for the sentence: who names the pointer or the allocator asked about. The
 * chain's platform record answers (rap_internal.h): a growable device platform whose engine keeps
 * shareable handles is what NCCL can register. */
int rapi_platform_registrable(rap_allocator *a, const char *who) {
  static const char hint[] = "NCCL registers memory made as ncclMemAlloc makes it: make the pool "
                             "over DeviceVmm(export=posix) (or fabric, auto)";
  const rapi_platform *p = a->platform;
  const char *root = p != NULL && p->root != NULL ? p->root->name : "a platform rap does not know";
  if (p != NULL && p->source == RAPI_SOURCE_VMM && p->memory == RAPI_MEMORY_DEVICE) {
    const rapi_vmm *v = p->vmm;
    if (v != NULL && (v->handle_types & (RAPI_IPC_POSIX | RAPI_IPC_FABRIC)) != 0) return RAP_OK;
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is memory of '%s' over '%s', a DeviceVmm made without "
                     "export=, whose mappings have no shareable handle; %s", who, a->name, root,
                     hint);
  }
  if (p != NULL && p->memory == RAPI_MEMORY_HOST)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is host memory of '%s' (over '%s'); %s", who, a->name,
                     root, hint);
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is memory of '%s' over '%s', not of a DeviceVmm made "
                   "with export=; %s", who, a->name, root, hint);
}

int rap_allocator_registrable(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_registrable: allocator is NULL");
  char who[RAPI_NAME_MAX + 64];
  snprintf(who, sizeof who, "rap_allocator_registrable('%s'): its memory", a->name);
  return rapi_platform_registrable(a, who);
}
