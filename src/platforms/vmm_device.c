/* vmm_device.c — DEVICE_VMM: the growable platform's device backend, over CUDA's virtual memory
 * management (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap, ...).
 *
 * The driver calls come through the runtime's cudaGetDriverEntryPointByVersion, so rap gains no
 * link dependency on libcuda: a machine without a driver still loads rap, and asking for
 * DEVICE_VMM there says why. Each mapping is one physical allocation (cuMemCreate) mapped at once
 * and its handle released at once: the memory lives as long as its mapping, and cuMemUnmap gives
 * it back. Every call is checked and becomes a status with a sentence. HIP builds and builds
 * without CUDA answer RAP_ERR_UNSUPPORTED with a sentence (the engine is vmm.c).
 */
#include "platforms/vmm.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if RAP_HAVE_CUDA && !RAP_HAVE_HIP
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <rap/cuda.h>

/* The driver's functions, looked up once per process. */
static struct {
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuGetErrorString_v6000 error_string;
  PFN_cuMemExportToShareableHandle_v10020 export_handle;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle;
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDeviceGetAttribute_v2000 attribute;
  const char *missing;             /* the first symbol the driver did not give, or NULL */
  cudaError_t error;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void) {
  static const struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"cuMemAddressReserve", (void **)&drv.reserve}, {"cuMemAddressFree", (void **)&drv.address_free},
      {"cuMemCreate", (void **)&drv.create},          {"cuMemRelease", (void **)&drv.release},
      {"cuMemMap", (void **)&drv.map},                {"cuMemSetAccess", (void **)&drv.set_access},
      {"cuMemUnmap", (void **)&drv.unmap},
      {"cuMemGetAllocationGranularity", (void **)&drv.granularity},
      {"cuGetErrorString", (void **)&drv.error_string},
      {"cuMemExportToShareableHandle", (void **)&drv.export_handle},
      {"cuMemImportFromShareableHandle", (void **)&drv.import_handle},
      {"cuDeviceGet", (void **)&drv.device_get},
      {"cuDeviceGetAttribute", (void **)&drv.attribute},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    /* 12000: the ABI of these symbols as of CUDA 12.0, which the typedefs above describe. */
    cudaError_t e = cudaGetDriverEntryPointByVersion(syms[i].name, syms[i].fn, 12000,
                                                     cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || *syms[i].fn == NULL) {
      (void)cudaGetLastError();
      drv.missing = syms[i].name;
      drv.error = e;
      return;
    }
  }
}

static int drv_ready(rap_allocator *self) {
  pthread_once(&drv_once, drv_load);
  if (drv.missing == NULL) return RAP_OK;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: the CUDA driver does not provide %s "
                   "(cudaGetDriverEntryPointByVersion: %s)", rap_allocator_name(self), drv.missing,
                   drv.error != cudaSuccess ? cudaGetErrorString(drv.error) : "symbol not found");
}

static int cu_fail(rapi_vmm *v, const char *call, CUresult r, size_t size) {
  const char *text = NULL;
  if (drv.error_string == NULL || drv.error_string(r, &text) != CUDA_SUCCESS || text == NULL)
    text = "unknown error";
  char sz[32];
  rapi_format_size(sz, sizeof sz, size);
  return rapi_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? RAP_ERR_NOMEM : RAP_ERR_BACKEND,
                   "%s: %s(%s) on device %d: %s", rap_allocator_name(v->self), call, sz, v->device,
                   text);
}

static CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

/* The properties of an exporting platform's memory: the handle types asked for (export=), and
 * gpuDirectRDMACapable where the device supports it with VMM memory, as NCCL's own allocations
 * ask (a request: CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE says what was granted). */
static CUmemAllocationProp export_prop(const rapi_vmm *v) {
  CUmemAllocationProp prop = device_prop(v->device);
  unsigned types = 0;
  if (v->handle_types & RAPI_IPC_POSIX) types |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (v->handle_types & RAPI_IPC_FABRIC) types |= CU_MEM_HANDLE_TYPE_FABRIC;
  prop.requestedHandleTypes = (CUmemAllocationHandleType)types;
  prop.allocFlags.gpuDirectRDMACapable = v->rdma ? 1 : 0;
  return prop;
}

/* create, map, set access, then release the handle (the mapping keeps the memory); each step
 * undone if a later one fails. */
/* An exporting platform keeps the handle (released when the mapping goes). The descriptor of its
 * POSIX handle, and its fabric handle where asked for (ipc.c publishes them), are made when a
 * block in the mapping is first exported: made at each growth they cost more than the growth
 * (cuMemExportToShareableHandle, about 0.6 ms on an H200, against 0.05-0.17 ms to create, map
 * and set access; docs/DESIGN.md, "Memory across processes", exporting memory). */
static int device_share(rapi_vmm *v, CUmemGenericAllocationHandle h, size_t size,
                        rapi_vmm_share *share) {
  CUresult r = CUDA_SUCCESS;
  int fd = -1;
  if (v->handle_types & RAPI_IPC_POSIX) {
    r = drv.export_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) return cu_fail(v, "cuMemExportToShareableHandle(posix fd)", r, size);
  }
  if (v->handle_types & RAPI_IPC_FABRIC) {
    CUmemFabricHandle fab;
    r = drv.export_handle(&fab, h, CU_MEM_HANDLE_TYPE_FABRIC, 0);
    if (r != CUDA_SUCCESS) {
      if (fd >= 0) close(fd);
      return cu_fail(v, "cuMemExportToShareableHandle(fabric)", r, size);
    }
    memcpy(share->fabric, &fab, sizeof share->fabric);
  }
  share->fd = fd;
  share->shared = true;
  return RAP_OK;
}

/* The backend's share: what another process opens a mapping by, made at its first export (the
 * engine asks once a mapping: share->shared). */
static int device_share_later(rapi_vmm *v, rapi_vmm_share *share, size_t size) {
  if (share->handle == 0) return RAP_OK;
  int saved = 0;
  int st = rapi_device_vmm_enter(v, &saved);
  if (st != RAP_OK) return st;
  st = device_share(v, (CUmemGenericAllocationHandle)share->handle, size, share);
  rapi_device_vmm_leave(v, saved);
  return st;
}

static int device_map_here(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  CUmemAllocationProp prop = v->handle_types ? export_prop(v) : device_prop(v->device);
  CUmemGenericAllocationHandle h;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)addr;
  CUresult r = drv.create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) return cu_fail(v, "cuMemCreate", r, size);
  r = drv.map(d, size, 0, h, 0);
  if (r != CUDA_SUCCESS) {
    (void)drv.release(h);
    return cu_fail(v, "cuMemMap", r, size);
  }
  CUmemAccessDesc access[65];   /* the device's own, then each peer's */
  size_t n = 0;
  memset(access, 0, sizeof access);
  access[n].location = prop.location;
  access[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int peer = 0; peer < 64; peer++)
    if (v->peers & ((uint64_t)1 << peer)) {
      access[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access[n].location.id = peer;
      access[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
  r = drv.set_access(d, size, access, n);
  if (r != CUDA_SUCCESS) {
    (void)drv.unmap(d, size);
    (void)drv.release(h);
    return cu_fail(v, "cuMemSetAccess", r, size);
  }
  if (v->handle_types) {   /* kept; shared at the first export (device_share_later) */
    share->handle = (uint64_t)h;
    share->fd = -1;
    share->shared = false;
    return RAP_OK;
  }
  r = drv.release(h);
  if (r != CUDA_SUCCESS) {
    (void)drv.unmap(d, size);
    return cu_fail(v, "cuMemRelease", r, size);
  }
  return RAP_OK;
}

static int device_map(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  int saved = 0;
  int st = rapi_device_vmm_enter(v, &saved);
  if (st != RAP_OK) return st;
  st = device_map_here(v, addr, size, share);
  rapi_device_vmm_leave(v, saved);
  return st;
}

static int device_unmap(rapi_vmm *v, char *addr, size_t size, rapi_vmm_share *share) {
  int saved = 0;
  int st = rapi_device_vmm_enter(v, &saved);
  if (st != RAP_OK) return st;
  CUresult r = drv.unmap((CUdeviceptr)(uintptr_t)addr, size);
  if (r == CUDA_SUCCESS && v->handle_types && share->handle != 0) {   /* the kept handle goes too */
    if (share->fd >= 0) close(share->fd);
    share->fd = -1;
    share->shared = false;
    r = drv.release((CUmemGenericAllocationHandle)share->handle);
    share->handle = 0;
    rapi_device_vmm_leave(v, saved);
    /* The addresses are unmapped whatever the release says: answered as kept, the mapping would
     * be handed out again and fault. The handle's memory stays the driver's: said, not returned. */
    if (r != CUDA_SUCCESS) {
      (void)cu_fail(v, "cuMemRelease", r, size);
      rap_log(RAP_LOG_ERROR, "%s (the mapping is gone; its memory may stay held until the process "
              "ends)", rap_last_error());
    }
    return RAP_OK;
  }
  rapi_device_vmm_leave(v, saved);
  return r == CUDA_SUCCESS ? RAP_OK : cu_fail(v, "cuMemUnmap", r, size);
}

static void device_unreserve(rapi_vmm *v) {
  int saved = 0;
  if (rapi_device_vmm_enter(v, &saved) != RAP_OK) return;
  rapi_device_backup_fini(v);   /* the copy streams and the ring (vmm_backup.c) */
  CUresult r = drv.address_free((CUdeviceptr)(uintptr_t)v->base, v->reserve);
  rapi_device_vmm_leave(v, saved);
  if (r != CUDA_SUCCESS) {
    cu_fail(v, "cuMemAddressFree", r, v->reserve);
    rap_log(RAP_LOG_WARN, "%s", rap_last_error());
  }
}

static const rapi_vmm_backend device_backend = {device_map, device_unmap, device_unreserve, false,
                                                 device_share_later};

/* The device's granularities and total memory, with the device current. */
static int device_sizes(rapi_vmm *v, size_t *least, size_t *recommended, size_t *total) {
  CUmemAllocationProp prop = v->handle_types ? export_prop(v) : device_prop(v->device);
  CUresult r = drv.granularity(least, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) r = drv.granularity(recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS) return cu_fail(v, "cuMemGetAllocationGranularity", r, 0);
  size_t free_bytes = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, total);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return rapi_fail(RAP_ERR_BACKEND, "%s: cudaMemGetInfo on device %d: %s",
                     rap_allocator_name(v->self), v->device, cudaGetErrorString(e));
  }
  return RAP_OK;
}

/* Sizes from the options or the device, then the reservation; device current. */
static int device_reserve(rapi_vmm *v, const rapi_vmm_sizes *sz) {
  size_t least = 0, recommended = 0, total = 0;
  int st = device_sizes(v, &least, &recommended, &total);
  if (st != RAP_OK) return st;
  size_t gran = sz->has_granularity ? sz->granularity : recommended;
  /* Memory NCCL registers is made in the recommended granularity (ncclMemAlloc): an exporting
   * platform never maps in less. */
  if (v->handle_types && gran < recommended) gran = recommended;
  size_t reserve = sz->has_reserve ? sz->reserve : total * 2;   /* slack for holes, as HostVmm (vmm.c) */
  if ((st = rapi_vmm_check_sizes(v->self, least, &reserve, gran)) != RAP_OK ||
      (st = rapi_vmm_check_piece(v->self, sz->piece, gran, v->handle_types != 0)) != RAP_OK)
    return st;
  CUdeviceptr base = 0;
  CUresult r = drv.reserve(&base, reserve, gran, 0, 0);
  if (r != CUDA_SUCCESS) return cu_fail(v, "cuMemAddressReserve", r, reserve);
  v->base = (char *)(uintptr_t)base;
  v->reserve = reserve;
  v->granularity = gran;
  v->piece = sz->piece;
  return RAP_OK;
}

/* What a pool that tracks no streams asks before memory goes back: cudaFree synchronizes the device
 * before it frees, cuMemUnmap is not documented to, so the device is synchronized here. The
 * ResourceAwarePool never asks: its free blocks are past their events. */
static void device_sync_before_unmap(rap_allocator *a) {
  rapi_vmm *v = ((rapi_tracked *)a->state)->impl;
  int saved = 0;
  if (rapi_device_vmm_enter(v, &saved) != RAP_OK) return;
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    rap_log(RAP_LOG_WARN, "%s: cudaDeviceSynchronize before giving memory back: %s",
            rap_allocator_name(a), cudaGetErrorString(e));
  }
  rapi_device_vmm_leave(v, saved);
}

/* export=posix|fabric|auto: the handle types, POSIX always (what NCCL registers and what
 * importers on this machine open), fabric where asked; auto asks for fabric only where creating
 * such memory works (the attribute may say yes and cuMemCreate still refuse without an IMEX
 * channel), probed with one real allocation. Device current. */
static int export_types(rapi_vmm *v, int mode) {
  int rdma = 0;
  CUdevice dev;
  if (drv.device_get(&dev, v->device) != CUDA_SUCCESS ||
      drv.attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev) !=
          CUDA_SUCCESS)
    rdma = 0;
  v->rdma = rdma != 0;
  v->handle_types = RAPI_IPC_POSIX | (mode >= 2 ? RAPI_IPC_FABRIC : 0);
  if (mode == 1) return RAP_OK;
  CUmemAllocationProp prop = export_prop(v);
  size_t gran = 0;
  CUresult r = drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  CUmemGenericAllocationHandle h;
  if (r == CUDA_SUCCESS) r = drv.create(&h, gran, &prop, 0);
  if (r == CUDA_SUCCESS) {
    (void)drv.release(h);
    return RAP_OK;
  }
  if (mode == 2) return cu_fail(v, "cuMemCreate (export=fabric, probed)", r, gran);
  rap_log(RAP_LOG_INFO, "%s: export=auto: fabric handles are refused here (%d); POSIX file "
          "descriptors only", rap_allocator_name(v->self), (int)r);
  v->handle_types = RAPI_IPC_POSIX;
  return RAP_OK;
}

/* DeviceVmm(device=N, reserve=SIZE, granularity=SIZE): reserve defaults to twice the device's
 * memory, granularity to the driver's recommended one (2 MiB on current GPUs). */
static int device_vmm_init(rap_allocator *self, void *state, rap_options *opts) {
  rapi_option_value o[RAPI_VMM_OPTIONS];
  rapi_vmm_sizes sz;
  int st = rapi_vmm_no_parent(self);
  if (st == RAP_OK) st = rapi_platform_options(opts, &rapi_device_vmm_options, o);
  if (st != RAP_OK) return st;
  uint64_t device = o[RAPI_VMM_DEVICE].u;
  int mode = (int)o[RAPI_VMM_EXPORT].u;
  rapi_vmm_sizes_of(o, &sz);
  if ((st = rapi_gpu_device_exists(self, device)) != RAP_OK || (st = drv_ready(self)) != RAP_OK)
    return st;
  rapi_vmm *v = rapi_calloc(1, sizeof *v);
  if (v == NULL) return rapi_fail(RAP_ERR_NOMEM, "%s: out of host memory", rap_allocator_name(self));
  v->ops = &device_backend;
  v->self = self;
  v->device = (int)device;
  int saved = 0;
  if ((st = rapi_device_vmm_enter(v, &saved)) == RAP_OK) {
    if (mode != 0) st = export_types(v, mode);
    if (st == RAP_OK) st = device_reserve(v, &sz);
    rapi_device_vmm_leave(v, saved);
  }
  if (st != RAP_OK) {
    free(v);
    return st;
  }
  if ((st = rapi_vmm_start(self, state, v)) != RAP_OK) return st;
  v->resizable.sync_before_unmap = device_sync_before_unmap;
  rapi_device_backup_init(v);   /* sleep's backup and copies (vmm_backup.c) */
  v->platform.memory = RAPI_MEMORY_DEVICE;
  v->platform.device = v->device;
  v->platform.peer = rapi_device_vmm_peer;
  self->devices_ok = rapi_device_bit(v->device);
  st = rapi_gpu_peers_option(self, v->device, o[RAPI_VMM_PEERS].text);
  if (st == RAP_OK && mode != 0) st = rapi_ipc_export_start(v, RAPI_IPC_DEVICE);
  if (st != RAP_OK) rapi_vmm_fini(self, state);   /* the manager calls no fini when init fails */
  return st;
}

/* A peer's access: every extent mapped now gets its descriptor, and later ones are mapped with it
 * (v->peers), under the lock that covers the extents. Revoking sets the peer's access to none. */
int rapi_device_vmm_peer(rap_allocator *a, int device, int enable) {
  rapi_tracked *p = a->state;
  rapi_vmm *v = p->impl;
  if (device >= 64)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: DeviceVmm gives access to devices 0..63, not %d",
                     rap_allocator_name(a), device);
  rapi_held held;
  rapi_lock(&p->lock, &held);
  int saved = 0;
  int st = rapi_device_vmm_enter(v, &saved);
  bool entered = st == RAP_OK;
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  for (rapi_vmm_extent *e = v->first; st == RAP_OK && e != NULL; e = e->next) {
    if (e->asleep) continue;   /* unmapped: mapped again with v->peers at its wake */
    CUresult r = drv.set_access((CUdeviceptr)(uintptr_t)e->addr, e->size, &access, 1);
    if (r != CUDA_SUCCESS) st = cu_fail(v, "cuMemSetAccess", r, e->size);
  }
  if (st == RAP_OK) {
    uint64_t bit = (uint64_t)1 << device;
    v->peers = enable ? v->peers | bit : v->peers & ~bit;
  }
  if (entered) rapi_device_vmm_leave(v, saved);
  rapi_unlock(&held);
  return st;
}


/* ---- the importer's side of a mapping (ipc_import.c; events and bus ids: gpu_device.c) ------- */

static int ipc_drv(const char *who) {
  pthread_once(&drv_once, drv_load);
  if (drv.missing == NULL) return RAP_OK;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: the CUDA driver does not provide %s", who, drv.missing);
}

static int ipc_cu_fail(const char *call, CUresult r, size_t size) {
  const char *text = NULL;
  if (drv.error_string == NULL || drv.error_string(r, &text) != CUDA_SUCCESS || text == NULL)
    text = "unknown error";
  char sz[32];
  rapi_format_size(sz, sizeof sz, size);
  return rapi_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? RAP_ERR_NOMEM : RAP_ERR_BACKEND,
                   "rap_ipc_import: %s(%s): %s", call, sz, text);
}

static int ipc_rt_fail(const char *call, cudaError_t e) {
  (void)cudaGetLastError();
  return rapi_fail(e == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM : RAP_ERR_BACKEND, "rap_ipc: %s: %s",
                   call, cudaGetErrorString(e));
}

/* Runs with device current (put back after): the driver calls need its primary context. */
static int ipc_enter(int device, int *saved) {
  cudaError_t e = cudaGetDevice(saved);
  if (e == cudaSuccess) e = cudaSetDevice(device);
  return e == cudaSuccess ? RAP_OK : ipc_rt_fail("cudaSetDevice", e);
}

int rapi_ipc_device_reserve(int device, size_t size, size_t granularity, char **base) {
  int saved = 0, st = ipc_drv("rap_ipc_import");
  if (st != RAP_OK || (st = ipc_enter(device, &saved)) != RAP_OK) return st;
  CUdeviceptr d = 0;
  CUresult r = drv.reserve(&d, size, granularity, 0, 0);
  (void)cudaSetDevice(saved);
  if (r != CUDA_SUCCESS) return ipc_cu_fail("cuMemAddressReserve", r, size);
  *base = (char *)(uintptr_t)d;
  return RAP_OK;
}

void rapi_ipc_device_unreserve(char *base, size_t size) {
  if (drv.address_free != NULL) (void)drv.address_free((CUdeviceptr)(uintptr_t)base, size);
}

/* The device an importer uses a block on: its CUDA stream's, or else the calling thread's current
 * device (an import on the host or a CPU queue: where that thread's kernels will run). Where it is
 * another device than the memory's, it must be able to reach it (reach: the devices found able,
 * bits); a refusal happens here, before anything is mapped. */
int rapi_ipc_device_user(int device, rap_resource *r, uint64_t *reach, int *user) {
  bool stream = r != NULL && strcmp(rap_resource_kind(r), "cuda") == 0;
  int dev = device, can = 0;
  cudaError_t e = stream ? cudaStreamGetDevice(rap_resource_cuda_stream(r), &dev) : cudaGetDevice(&dev);
  if (e != cudaSuccess) return ipc_rt_fail(stream ? "cudaStreamGetDevice" : "cudaGetDevice", e);
  *user = dev;
  if (dev == device || (dev < 64 && (*reach >> dev & 1))) return RAP_OK;
  if ((e = cudaDeviceCanAccessPeer(&can, dev, device)) != cudaSuccess)
    return ipc_rt_fail("cudaDeviceCanAccessPeer", e);
  if (!can)
    return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc_import: the block lies in device %d's memory and "
                     "the importer uses it on device %d (%s), which cannot access device %d's memory "
                     "(no peer access between them); import it on a stream of device %d", device, dev,
                     stream ? "its stream's" : "the calling thread's current device", device, device);
  if (dev < 64) *reach |= (uint64_t)1 << dev;
  return RAP_OK;
}

static CUmemAccessDesc ipc_access(int device) {
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return access;
}

/* Imports the exporter's memory (a POSIX descriptor, else a fabric handle), maps it at addr and
 * gives access to the memory's device and to user (rapi_ipc_device_user) where that is another;
 * the mapping holds the memory, so the handle goes at once. */
int rapi_ipc_device_map(int device, int user, char *addr, size_t size, int fd, const unsigned char *fabric) {
  int saved = 0, st = ipc_drv("rap_ipc_import");
  if (st != RAP_OK || (st = ipc_enter(device, &saved)) != RAP_OK) return st;
  CUmemGenericAllocationHandle h;
  CUdeviceptr d = (CUdeviceptr)(uintptr_t)addr;
  CUresult r = fd >= 0 ? drv.import_handle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                       : drv.import_handle(&h, (void *)fabric, CU_MEM_HANDLE_TYPE_FABRIC);
  if (r != CUDA_SUCCESS) {
    st = ipc_cu_fail("cuMemImportFromShareableHandle", r, size);
  } else if ((r = drv.map(d, size, 0, h, 0)) != CUDA_SUCCESS) {
    st = ipc_cu_fail("cuMemMap", r, size);
    (void)drv.release(h);
  } else {
    CUmemAccessDesc access[2] = {ipc_access(device), ipc_access(user)};
    if ((r = drv.set_access(d, size, access, user >= 0 && user != device ? 2 : 1)) != CUDA_SUCCESS) {
      st = ipc_cu_fail("cuMemSetAccess", r, size);
      (void)drv.unmap(d, size);
    }
    (void)drv.release(h);
  }
  (void)cudaSetDevice(saved);
  return st;
}

/* A mapping made here earlier, now also used on device user: that device is given access. */
int rapi_ipc_device_grant(int device, int user, char *addr, size_t size) {
  int saved = 0, st = ipc_drv("rap_ipc_import");
  if (st != RAP_OK || (st = ipc_enter(device, &saved)) != RAP_OK) return st;
  CUmemAccessDesc access = ipc_access(user);
  CUresult r = drv.set_access((CUdeviceptr)(uintptr_t)addr, size, &access, 1);
  (void)cudaSetDevice(saved);
  return r == CUDA_SUCCESS ? RAP_OK : ipc_cu_fail("cuMemSetAccess (for the importer's device)", r, size);
}

int rapi_ipc_device_unmap(char *addr, size_t size) {
  if (drv.unmap == NULL) return RAP_OK;
  CUresult r = drv.unmap((CUdeviceptr)(uintptr_t)addr, size);
  return r == CUDA_SUCCESS ? RAP_OK : ipc_cu_fail("cuMemUnmap", r, size);
}


#else /* no CUDA, or HIP: a clear refusal */

static int device_vmm_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)state;
  (void)opts;
#if RAP_HAVE_HIP
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: the growable device platform is CUDA only; a HIP "
                   "build has no DEVICE_VMM (HOST_VMM is the host analogue)", rap_allocator_name(self));
#else
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: rap was built without CUDA (RAP_WITH_CUDA=OFF or no "
                   "toolkit found); HOST_VMM is the host analogue", rap_allocator_name(self));
#endif
}

int rapi_device_vmm_peer(rap_allocator *a, int device, int enable) {
  (void)device;
  (void)enable;
  return rapi_fail(RAP_ERR_UNSUPPORTED, "%s: the growable device platform is CUDA only",
                   rap_allocator_name(a));
}
static int no_device_ipc(void) {
  return rapi_fail(RAP_ERR_UNSUPPORTED, "rap_ipc: device memory across processes needs a CUDA "
                   "build (DeviceVmm); HostVmm(export=posix) is the host's");
}
int rapi_ipc_device_reserve(int device, size_t size, size_t granularity, char **base) {
  (void)device, (void)size, (void)granularity, (void)base;
  return no_device_ipc();
}
void rapi_ipc_device_unreserve(char *base, size_t size) { (void)base, (void)size; }
int rapi_ipc_device_user(int device, rap_resource *r, uint64_t *reach, int *user) {
  (void)device, (void)r, (void)reach, (void)user;
  return no_device_ipc();
}
int rapi_ipc_device_map(int device, int user, char *addr, size_t size, int fd, const unsigned char *fabric) {
  (void)device, (void)user, (void)addr, (void)size, (void)fd, (void)fabric;
  return no_device_ipc();
}
int rapi_ipc_device_grant(int device, int user, char *addr, size_t size) {
  (void)device, (void)user, (void)addr, (void)size;
  return no_device_ipc();
}
int rapi_ipc_device_unmap(char *addr, size_t size) {
  (void)addr, (void)size;
  return RAP_OK;
}
#endif

const rap_strategy rapi_device_vmm_strategy = {
    .version = RAP_STRATEGY_VERSION,
    .name = "DeviceVmm",
    .flags = RAP_STRATEGY_CONCURRENT_OWNS,
    .state_size = sizeof(rapi_tracked),
    .init = device_vmm_init,
    RAPI_VMM_METHODS,
};
