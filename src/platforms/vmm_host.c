/* vmm_host.c — HOST_VMM: the growable platform's engine (vmm.c) over host memory. A reserve is an
 * mmap of PROT_NONE; a mapping is mprotect (or, to export, a memfd mapped shared in place); giving
 * back is madvise(DONTNEED) and PROT_NONE again. A sleeping pool's backup is plain host memory and
 * its copies memcpy. The host tests run the engine's logic through it, as the device runs it.
 */
#include "platforms/vmm.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* HostVmm's backup is plain host memory (through the seam, so tests can fail it) and memcpy. */
static int host_backup_reserve(rap_allocator *a, rapi_backup *bk, size_t bytes, bool pinned) {
  (void)pinned;   /* the host's memory is what its copies use */
  if (bk->cap >= bytes) return RAP_OK;
  void *h = rapi_malloc(bytes ? bytes : 1);
  if (h == NULL) {
    char sz[32];
    rapi_format_size(sz, sizeof sz, bytes);
    return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory for a backup of %s",
                     rap_allocator_name(a), sz);
  }
  free(bk->host);
  bk->host = h;
  bk->cap = bytes;
  return RAP_OK;
}

static void host_backup_free(rap_allocator *a, rapi_backup *bk) {
  (void)a;
  free(bk->host);
  bk->host = NULL;
  bk->cap = 0;
}

static int host_copy(rap_allocator *a, rapi_backup *bk, rapi_runs *runs, bool to_host) {
  (void)a;
  char *host = bk->host;
  for (rapi_run r; runs->next(runs, &r); host += r.size)
    memcpy(to_host ? host : r.ptr, to_host ? r.ptr : host, r.size);
  return RAP_OK;
}

/* ---- HOST_VMM: mmap PROT_NONE reserves, mprotect maps, madvise and PROT_NONE give back ---------- */

static int host_fail(rapi_vmm *v, const char *call, char *addr, size_t size, int err) {
  char sz[32];
  rapi_format_size(sz, sizeof sz, size);
  return rapi_fail(err == ENOMEM ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "%s: %s(%p, %s): %s",
                   rap_allocator_name(v->self), call, (void *)addr, sz, strerror(err));
}

static int host_map(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  (void)share;
  if (mprotect(addr, size, PROT_READ | PROT_WRITE) != 0)
    return host_fail(v, "mprotect(read|write)", addr, size, errno);
  return RAP_OK;
}

/* The pages go back to the kernel (MADV_DONTNEED: a later map reads zeros) and the addresses
 * become inaccessible again, as an unmapped device range is. */
static int host_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  (void)share;
  if (madvise(addr, size, MADV_DONTNEED) != 0) return host_fail(v, "madvise(dontneed)", addr, size, errno);
  if (mprotect(addr, size, PROT_NONE) != 0) return host_fail(v, "mprotect(none)", addr, size, errno);
  return RAP_OK;
}

static void host_unreserve(rapi_vmm *v) {
  if (v->raw != NULL && munmap(v->raw, v->raw_size) != 0)
    rap_log(RAP_LOG_WARN, "%s: munmap of the reserved range failed: %s", rap_allocator_name(v->self),
            strerror(errno));
}

static const rapi_vmm_backend host_backend = {host_map, host_unmap, host_unreserve, true, NULL};

/* HostVmm(export=posix): each mapping is its own memfd mapped shared at its place in the range, so
 * that another process can map the same pages (ipc.c); giving it back puts the reservation
 * (PROT_NONE, no pages) over the addresses again and closes the memfd. Pages a second process
 * still maps stay alive there, as device memory an importer holds does. */
static int host_share_map(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  int fd = memfd_create("rap-HostVmm", MFD_CLOEXEC);
  if (fd < 0) return host_fail(v, "memfd_create", addr, size, errno);
  if (ftruncate(fd, (off_t)size) != 0) {
    int err = errno;
    close(fd);
    return host_fail(v, "ftruncate(memfd)", addr, size, err);
  }
  if (mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    int err = errno;
    close(fd);
    return host_fail(v, "mmap(memfd, shared, fixed)", addr, size, err);
  }
  share->fd = fd;
  return RAP_OK;
}

static int host_share_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  if (mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
      MAP_FAILED)
    return host_fail(v, "mmap(PROT_NONE, fixed)", addr, size, errno);
  if (share->fd >= 0) close(share->fd);
  share->fd = -1;
  return RAP_OK;
}

static const rapi_vmm_backend host_share_backend = {host_share_map, host_share_unmap, host_unreserve,
                                                     false, NULL};

/* HostVmm(reserve=SIZE, granularity=SIZE): reserve defaults to twice the host's memory (address
 * space is cheap, and the slack keeps holes left by freed allocations from filling the range), the
 * granularity to 2 MiB, the device's usual granule, so that host runs see the device's arithmetic. */
static int host_vmm_init(rap_allocator *self, void *state, rap_options *opts) {
  rapi_option_value o[RAPI_VMM_OPTIONS];
  rapi_vmm_sizes asked;
  if (rapi_vmm_no_parent(self) != RAP_OK) return RAP_ERR_INVALID;
  int st = rapi_platform_options(opts, &rapi_host_vmm_options, o);
  if (st != RAP_OK) return st;
  int mode = (int)o[RAPI_VMM_EXPORT].u;
  rapi_vmm_sizes_of(o, &asked);
  if (o[RAPI_VMM_PEERS].text != NULL)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: option 'peers' (access from other devices) is for "
                     "DeviceVmm: HostVmm's memory is the host's", rap_allocator_name(self));
  long page = sysconf(_SC_PAGESIZE);
  size_t gran = asked.has_granularity ? asked.granularity : (size_t)2 << 20, reserve = asked.reserve;
  if (!asked.has_reserve) {
    size_t free_bytes = 0, total = 0;
    if (rapi_host_memory_info(&free_bytes, &total) != RAP_OK || total == 0) total = (size_t)16 << 30;
    reserve = total * 2;
  }
  if ((st = rapi_vmm_check_sizes(self, page > 0 ? (size_t)page : 4096, &reserve, gran)) != RAP_OK ||
      (st = rapi_vmm_check_piece(self, asked.piece, gran, mode != 0)) != RAP_OK)
    return st;
  rapi_vmm *v = rapi_calloc(1, sizeof *v);
  if (v == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  v->ops = mode != 0 ? &host_share_backend : &host_backend;
  v->handle_types = mode != 0 ? RAPI_IPC_POSIX : 0;
  v->self = self;
  v->raw_size = reserve + gran;   /* slack to align the range to the granularity */
  v->raw = mmap(NULL, v->raw_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (v->raw == MAP_FAILED) {
    int err = errno;
    free(v);
    char sz[32];
    rapi_format_size(sz, sizeof sz, reserve);
    return rapi_fail(err == ENOMEM ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "%s: reserving %s of "
                     "addresses (mmap, PROT_NONE) failed: %s", rap_allocator_name(self), sz,
                     strerror(err));
  }
  v->base = (char *)rapi_align_up((uintptr_t)v->raw, gran);
  v->reserve = reserve;
  v->granularity = gran;
  v->piece = asked.piece;
  if ((st = rapi_vmm_start(self, state, v)) != RAP_OK) return st;
  v->resizable.backup_reserve = host_backup_reserve;
  v->resizable.backup_free = host_backup_free;
  v->resizable.copy = host_copy;
  v->segments.device = -1;   /* host memory */
  if (mode == 0) return st;
  if ((st = rapi_ipc_export_start(v, RAPI_IPC_HOST)) != RAP_OK) rapi_vmm_fini(self, state);
  return st;
}

const rap_strategy rapi_host_vmm_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "HostVmm",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = host_vmm_init,
    RAPI_VMM_METHODS,
};
