/* registrable.c — rap_pointer_registrable: whether NCCL can register a pointer's memory.
 *
 * NCCL's user-buffer and window registration take memory made as ncclMemAlloc makes it: CUDA
 * virtual memory with shareable (POSIX file descriptor, or fabric) handles. In rap that is a
 * DeviceVmm made with export= at the bottom of the pointer's chain (docs/DESIGN.md, "Memory across
 * processes"); anything else gets a sentence naming what the memory is and the spec to use.
 */
#include "rap_internal.h"
#include "resources/vmm.h"

#include <stdio.h>

/* What a's memory is, for the sentence: who names the pointer or the allocator asked about. */
static int registrable(rap_allocator *a, const char *who) {
  rap_allocator *root = a;
  while (root->parent != NULL) root = root->parent;
  static const char hint[] = "NCCL registers memory made as ncclMemAlloc makes it: make the pool "
                             "over DeviceVmm(export=posix) (or fabric, auto)";
  if (root->strategy == &rapi_device_vmm_strategy) {
    const rapi_vmm *v = ((rapi_tracked *)root->state)->impl;
    if (v != NULL && (v->handle_types & (RAPI_IPC_POSIX | RAPI_IPC_FABRIC)) != 0) return RAP_OK;
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is memory of '%s' over '%s', a DeviceVmm made without "
                     "export=, whose mappings have no shareable handle; %s", who, a->name,
                     root->name, hint);
  }
  if (root->strategy == &rapi_host_vmm_strategy)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is host memory of '%s' (over '%s'); %s", who, a->name,
                     root->name, hint);
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s is memory of '%s' over '%s' (%s), not of a DeviceVmm "
                   "made with export=; %s", who, a->name, root->name, root->strategy->name, hint);
}

int rap_allocator_registrable(rap_allocator *a) {
  if (a == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_allocator_registrable: allocator is NULL");
  char who[RAPI_NAME_MAX + 64];
  snprintf(who, sizeof who, "rap_allocator_registrable('%s'): its memory", a->name);
  return registrable(a, who);
}

int rap_pointer_registrable(rap_manager *rm, const void *ptr) {
  if (rm == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_pointer_registrable: manager is NULL");
  rap_allocator *a = NULL;
  if (rap_allocator_find(rm, ptr, &a) != RAP_OK)
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_pointer_registrable: no allocator of this "
                     "manager handed out %p", ptr);
  char who[64];
  snprintf(who, sizeof who, "rap_pointer_registrable: %p", ptr);
  return registrable(a, who);
}
