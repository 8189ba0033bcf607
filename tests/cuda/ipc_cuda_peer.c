/* ipc_cuda_peer.c — the importer of the two-process race detector (test_cuda_ipc.c): reads
 * descriptors (64 bytes each) on stdin, imports each on a stream of its own, and queues there a
 * kernel that waits for a gate this process opens after a random time (0-3 ms), then a kernel that
 * copies the block into a buffer of its own, then the close (an interprocess event). The exporter
 * meanwhile runs ahead and frees. At the end every copy must hold its block's tag, and the answer
 * on stdout is "foreign N" (words that were not the tag) or "err STATUS sentence".
 *   rap_ipc_cuda_peer SIZE [DEVICE [host|stream [SECOND]]]: the stream and kernels on DEVICE; with
 * "host", each block is imported and closed on the host (no resource) by a thread whose current
 * device is DEVICE, the stream synchronized before the close. With SECOND, every other block (the
 * 2nd, 4th, ...) is used on device SECOND instead: its stream and kernels, its current device.
 */
#define _GNU_SOURCE   /* nanosleep, rand_r */
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <rap/cuda.h>
#include <rap/rap.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_STEPS 256

typedef struct opener {
  gpu_gate *gates[MAX_STEPS];
  int n;
  pthread_mutex_t lock;
  int done;
} opener;

/* Opens the gates in order, each after a random 0-3 ms: the importer's work takes a random time. */
static void *open_gates(void *arg) {
  opener *o = arg;
  unsigned seed = (unsigned)getpid();
  for (int k = 0;; k++) {
    pthread_mutex_lock(&o->lock);
    int n = o->n, done = o->done;
    pthread_mutex_unlock(&o->lock);
    if (k >= n) {
      if (done) return NULL;
      k--;
      struct timespec t = {0, 100000};
      nanosleep(&t, NULL);
      continue;
    }
    struct timespec t = {0, (long)(rand_r(&seed) % 3000) * 1000};
    nanosleep(&t, NULL);
    gpu_gate_open(o->gates[k]);
  }
}

static int fail(int st) {
  printf("err %s %s\n", rap_status_name(st), rap_last_error());
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 20;
  /* The device of this process's stream and kernels (and SECOND's, for every other block). */
  int device = argc > 2 ? atoi(argv[2]) : 0, second = argc > 4 ? atoi(argv[4]) : -1;
  if (argc > 2 && cudaSetDevice(device) != cudaSuccess) {
    printf("err cudaSetDevice(%s) failed\n", argv[2]);
    return 1;
  }
  bool on_host = argc > 3 && strcmp(argv[3], "host") == 0;
  rap_manager *rm = NULL;
  rap_resource *q = NULL, *q2 = NULL;
  int st = rap_manager_create(&rm);
  if (st == RAP_OK) st = rap_resource_create_cuda_stream(rm, &q);
  if (st == RAP_OK && second >= 0) {
    if (cudaSetDevice(second) != cudaSuccess) return fail(RAP_ERR_BACKEND);
    st = rap_resource_create_cuda_stream(rm, &q2);
    if (cudaSetDevice(device) != cudaSuccess) return fail(RAP_ERR_BACKEND);
  }
  if (st != RAP_OK) return fail(st);
  cudaStream_t s = rap_resource_cuda_stream(q);
  opener o;
  memset(&o, 0, sizeof o);
  pthread_mutex_init(&o.lock, NULL);
  pthread_t th;
  pthread_create(&th, NULL, open_gates, &o);
  unsigned char *copies[MAX_STEPS], *scratch = NULL;
  int tags[MAX_STEPS], n = 0;
  if (cudaMalloc((void **)&scratch, 256) != cudaSuccess) return fail(RAP_ERR_BACKEND);
  rap_ipc_desc d;
  while (n < MAX_STEPS && fread(&d, sizeof d, 1, stdin) == 1) {
    int tag = 0;
    if (fread(&tag, sizeof tag, 1, stdin) != 1) break;
    void *p = NULL;
    bool other = q2 != NULL && n % 2 == 1;   /* used on SECOND, its current device meanwhile */
    rap_resource *use = other ? q2 : q;
    cudaStream_t us = rap_resource_cuda_stream(use);
    if (other && cudaSetDevice(second) != cudaSuccess) return fail(RAP_ERR_BACKEND);
    if ((st = rap_ipc_import(rm, &d, on_host ? NULL : use, &p)) != RAP_OK) return fail(st);
    if (cudaMalloc((void **)&copies[n], size) != cudaSuccess || gpu_gate_create(&o.gates[n]) != 0)
      return fail(RAP_ERR_BACKEND);
    tags[n] = tag;
    if (!on_host && !other) gpu_gated_fill(s, o.gates[n], scratch, 256, 0);   /* a random time */
    gpu_copy(us, copies[n], p, size);                   /* then it reads the block */
    if (on_host && cudaStreamSynchronize(us) != cudaSuccess) {
      printf("err cudaStreamSynchronize: %s\n", cudaGetErrorString(cudaGetLastError()));
      return 1;
    }
    if ((st = rap_ipc_close(rm, p, on_host ? NULL : use)) != RAP_OK) return fail(st);
    if (other && cudaSetDevice(device) != cudaSuccess) return fail(RAP_ERR_BACKEND);
    pthread_mutex_lock(&o.lock);
    o.n = ++n;
    pthread_mutex_unlock(&o.lock);
  }
  pthread_mutex_lock(&o.lock);
  o.done = 1;
  pthread_mutex_unlock(&o.lock);
  pthread_join(th, NULL);
  if (cudaStreamSynchronize(s) != cudaSuccess ||
      (q2 != NULL && cudaStreamSynchronize(rap_resource_cuda_stream(q2)) != cudaSuccess))
    return fail(RAP_ERR_BACKEND);
  size_t foreign = 0;
  unsigned char *host = malloc(size);
  for (int k = 0; k < n; k++) {
    cudaMemcpy(host, copies[k], size, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < size; i++) foreign += host[i] != (unsigned char)tags[k];
    cudaFree(copies[k]);
    gpu_gate_destroy(o.gates[k]);
  }
  free(host);
  cudaFree(scratch);
  if ((q2 != NULL && (st = rap_resource_destroy(q2)) != RAP_OK) || (st = rap_resource_destroy(q)) != RAP_OK ||
      (st = rap_manager_destroy(rm)) != RAP_OK)
    return fail(st);
  printf("foreign %zu of %d blocks\n", foreign, n);
  fflush(stdout);
  return 0;
}
