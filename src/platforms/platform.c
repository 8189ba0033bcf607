/* platform.c — the questions asked of the platform at the bottom of a chain, answered from its
 * record (rapi_platform, rap_internal.h): a device's access to the memory (peer access, and the
 * peers= option that grants it at make time, whose list is parsed here only), the address a
 * kernel uses for a block, and whether a pointer lies in a growable platform's reserved range.
 *
 * Each is a small dispatcher: what the memory is answers most of it, and the record's methods the
 * rest (CUDA's peer access for DEVICE::N, a pool's or a mapping's access for StreamOrdered and
 * DEVICE_VMM, the device mapping of pinned memory). A platform added later fills its record in;
 * nothing here names it. Compiled into every build: without a GPU backend only host memory exists.
 */
#include "rap_internal.h"
#include "platforms/platform_options.h"
#include "platforms/vmm.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static rap_allocator *root_of(rap_allocator *a) {
  while (a->parent != NULL) a = a->parent;
  return a;
}

int rapi_platform_peer_access(rap_allocator *a, int device, int enable, int *owner) {
  *owner = -1;
  const rapi_platform *p = a->platform;
  rap_allocator *root = p != NULL && p->root != NULL ? p->root : root_of(a);
  const char *who = rap_allocator_name(root);
  if (p == NULL || p->memory == RAPI_MEMORY_HOST) {
    if (!rapi_cuda_compiled())
      return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access('%s'): rap was built "
                       "without CUDA, so this is host memory: there is no device memory to share", who);
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_set_peer_access: the memory comes from '%s' "
                     "(%s), host memory, which a device reaches only when it is pinned (PINNED)", who,
                     rap_allocator_strategy(root));
  }
  if (p->memory != RAPI_MEMORY_DEVICE) return RAP_OK;   /* pinned and managed: every device reaches it */
  int st = rapi_gpu_device_exists(root, (uint64_t)device);
  if (st != RAP_OK) return st;
  *owner = p->device;
  if (device == p->device) return RAP_OK;
  if ((st = rapi_gpu_can_access_peer(who, device, p->device)) != RAP_OK) return st;
  return p->peer(root, device, enable);
}

/* A pointer that is not a block's start (a tensor's view) is still the memory of the growable
 * platform whose reserved range holds it. */
bool rapi_platform_in_range(const rap_allocator *x, const void *ptr) {
  const rapi_platform *p = x->platform;
  if (p == NULL || p->root != x || p->source != RAPI_SOURCE_VMM || p->vmm == NULL) return false;
  return (const char *)ptr >= p->vmm->base && (const char *)ptr < p->vmm->base + p->vmm->reserve;
}

/* A list of peers is read here only, for a platform's init and for rap_spec_check alike
 * (platform_options.c). */
int rapi_peers_next(const char *who, const char *text, const char **at, int *device) {
  const char *c = *at;
  if (c == NULL) return 0;
  char *end;
  long d = strtol(c, &end, 10);
  if (end == c || !isdigit((unsigned char)*c) || d > 4096 || (*end != 0 && *end != '+'))
    return rapi_fail(RAP_ERR_INVALID, "%s: option 'peers' is 'all' or device numbers joined by "
                     "'+' (peers=1+3), not '%s'", who, text);
  *device = (int)d;
  *at = *end == '+' ? end + 1 : NULL;
  return 1;
}

/* peers=all (every other device that can reach this one's memory) or peers=1+3 (each must). */
int rapi_gpu_peers_option(rap_allocator *self, int owner, const char *peers) {
  if (peers == NULL) return RAP_OK;
  int count = 0;
  int st = rapi_cuda_devices(rap_allocator_name(self), &count);
  if (st != RAP_OK) return st;
  bool all = strcmp(peers, "all") == 0;
  const char *at = peers;
  for (int d = 0;; d++) {
    int device = d;
    if (all && d >= count) break;
    if (!all && (st = rapi_peers_next(rap_allocator_name(self), peers, &at, &device)) != 1)
      return st;   /* 0: every device of the list was granted */
    if (device == owner) continue;
    int own = -1;
    st = rapi_platform_peer_access(self, device, 1, &own);
    if (st == RAP_ERR_UNSUPPORTED && all) continue;   /* all: those that can */
    if (st != RAP_OK) return st;
    self->devices_ok |= rapi_device_bit(device);
  }
  return RAP_OK;
}

/* The address a kernel uses for a block of a: the block itself for device and managed memory, the
 * platform's answer for pinned memory; none for host memory. */
int rap_device_pointer(rap_allocator *a, const void *ptr, void **out) {
  if (a == NULL || ptr == NULL || out == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer: allocator, pointer or out is NULL");
  const rapi_platform *p = a->platform;
  if (p == NULL || p->memory == RAPI_MEMORY_HOST) {
    if (!rapi_cuda_compiled())
      return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_device_pointer('%s'): rap was built without CUDA",
                       rap_allocator_name(a));
    return rapi_fail(RAP_ERR_INVALID, "rap_device_pointer('%s'): its memory comes from '%s', which a "
                     "device cannot address (use PINNED or Pinned(mapped=1))", rap_allocator_name(a),
                     rap_allocator_name(p != NULL && p->root != NULL ? p->root : root_of(a)));
  }
  if (p->device_pointer != NULL) return p->device_pointer(a, ptr, out);
  *out = (void *)ptr;
  return RAP_OK;
}
