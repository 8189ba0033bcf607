/* memory_info.c — how much memory there is under an allocator: rap_allocator_memory_info, and the
 * total that fractional limits (SizeLimiter's limit=50%) are taken of.
 *
 * The answer is about the platform at the bottom of the allocator's chain. Host memory (HOST,
 * PINNED) is the machine's physical memory, or the container's limit when a control group sets a
 * lower one (cgroup v2 memory.max, v1 memory.limit_in_bytes), with what the kernel says is
 * available (MemAvailable) as the free part. Device memory (DEVICE, DEVICE::N, UM, DEVICE_VMM,
 * StreamOrdered) is what the GPU runtime says for that device (resources/gpu_device.c). Which is
 * which comes from the platform's record (rapi_platform).
 */
#include "rap_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A number from the first line of a file, or 0 ("max", missing, unreadable). */
static size_t number_in(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  unsigned long long v = 0;
  if (fscanf(f, "%llu", &v) != 1) v = 0;
  fclose(f);
  return (size_t)v;
}

/* MemAvailable from /proc/meminfo, in bytes; 0 if the kernel does not say. */
static size_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[128];
  size_t kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long v;
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = (size_t)v;
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

int rapi_host_memory_info(size_t *free_bytes, size_t *total_bytes) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0)
    return rapi_fail(RAP_ERR_BACKEND, "the host's memory size is unknown (sysconf(_SC_PHYS_PAGES))");
  size_t total = (size_t)pages * (size_t)page;
  size_t avail = mem_available();
  if (avail == 0) {
    long av = sysconf(_SC_AVPHYS_PAGES);
    avail = av > 0 ? (size_t)av * (size_t)page : total;
  }
  /* A control group's limit below the machine's is what this process can have. */
  size_t limit = number_in("/sys/fs/cgroup/memory.max");
  size_t used = number_in("/sys/fs/cgroup/memory.current");
  if (limit == 0) {
    limit = number_in("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = number_in("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  if (limit > 0 && limit < total) {
    total = limit;
    size_t left = used < limit ? limit - used : 0;
    if (left < avail) avail = left;
  }
  if (avail > total) avail = total;
  *free_bytes = avail;
  *total_bytes = total;
  return RAP_OK;
}

/* Host memory (HOST, PINNED, HOST_VMM) is the host's; device and managed memory the device's, unless
 * the platform's record answers itself. */
int rap_allocator_memory_info(rap_allocator *a, size_t *free_bytes, size_t *total_bytes) {
  if (a == NULL || free_bytes == NULL || total_bytes == NULL)
    return rapi_fail(RAP_ERR_INVALID, "rap_allocator_memory_info: allocator, free or total is NULL");
  const rapi_platform *p = a->platform;
  if (p == NULL) {
    rap_allocator *root = a;
    while (rap_allocator_parent(root) != NULL) root = rap_allocator_parent(root);
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_allocator_memory_info('%s'): '%s' at the bottom of "
                     "its chain is no platform allocator rap knows the memory of",
                     rap_allocator_name(a), rap_allocator_name(root));
  }
  if (p->memory_info != NULL) return p->memory_info(p->root, free_bytes, total_bytes);
  if (p->memory == RAPI_MEMORY_HOST || p->memory == RAPI_MEMORY_PINNED)
    return rapi_host_memory_info(free_bytes, total_bytes);
  return rapi_gpu_device_memory(rap_allocator_name(p->root), p->device, free_bytes, total_bytes);
}
