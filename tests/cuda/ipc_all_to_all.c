/* ipc_all_to_all.c — memory across processes among every GPU of the machine: N processes, one a
 * device, each exporting one block of its pool to every other (an all-to-all of descriptors,
 * passed as files in a temporary folder), whose kernels read and write it:
 *   1. rank i fills its block (N slots) with its tag and exports it once to each other rank;
 *   2. rank j imports the N-1 blocks addressed to it on its stream (timed: the first import of
 *      each opens that peer's pool), reads slot j of each (the owner's tag) and writes its own
 *      pattern there with a kernel of its device;
 *   3. every owner checks its block (each slot its writer's pattern, its own its tag), frees it
 *      while it is imported, and allocates twice more: the freed block stays with the importers;
 *   4. every importer reads every slot again, then closes; the owners poll: every block back,
 *      0 bytes and 0 blocks live.
 * Foreign words (a byte that is not what the slot should hold) must be 0 everywhere.
 *   rap_ipc_all_to_all [vmm|so|all|SPEC] [RANKS] [SLOT_BYTES]
 * vmm: ResourceAwarePool(DeviceVmm(device=D, export=posix)); so: ResourceAwarePool(StreamOrdered(
 * device=D, pool=new, export=posix)); all (default): both, one after the other; a SPEC of one's
 * own names its device "%d". RANKS: default every GPU. Exit 0 when every rank passed, 77 (skipped)
 * with fewer than two GPUs, 1 otherwise. One line per rank and a summary on stdout.
 */
#define _GNU_SOURCE
#include "kernels.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <rap/cuda.h>
#include <rap/rap.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_RANKS 64
#define SKIPPED 77
#define OWNER_TAG(i) (1 + (i))        /* what an owner fills its block with */
#define SLOT_TAG(j) (0x80 + (j))      /* what importer j writes into its slot */

static const char *const VMM = "ResourceAwarePool(DeviceVmm(device=%d, export=posix))";
static const char *const SO = "ResourceAwarePool(StreamOrdered(device=%d, pool=new, export=posix))";

typedef struct rank_ctx {
  int rank, n;
  const char *dir;
  size_t slot, bytes;             /* one slot; the block: n slots */
  rap_manager *rm;
  rap_allocator *pool;
  rap_resource *r;
  cudaStream_t s;
  unsigned long long *counter;    /* foreign words, in device memory */
  unsigned long long foreign;
} rank_ctx;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void touch(const char *dir, const char *name, int rank) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
  int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
}

static int fail(rank_ctx *c, const char *what, int st) {
  if (st != RAP_OK) printf("rank %d: FAILED: %s: %s %s\n", c->rank, what, rap_status_name(st), rap_last_error());
  else printf("rank %d: FAILED: %s (CUDA: %s)\n", c->rank, what, cudaGetErrorString(cudaGetLastError()));
  fflush(stdout);
  touch(c->dir, "abort", c->rank);   /* the other ranks stop waiting */
  return 1;
}

/* A barrier of files: this rank's name.RANK, then every rank's (two minutes at most; any rank's
 * abort ends it). */
static bool wait_all(rank_ctx *c, const char *name) {
  touch(c->dir, name, c->rank);
  char path[4096];
  for (double t0 = now_ms(); now_ms() - t0 < 120e3;) {
    int here = 0;
    for (int k = 0; k <= c->n; k++) {   /* abort.N: the launcher's */
      snprintf(path, sizeof path, "%s/%s.%d", c->dir, name, k);
      here += k < c->n && access(path, F_OK) == 0;
      snprintf(path, sizeof path, "%s/abort.%d", c->dir, k);
      if (access(path, F_OK) == 0) return false;
    }
    if (here == c->n) return true;
    struct timespec t = {0, 500000};
    nanosleep(&t, NULL);
  }
  return false;
}

/* The descriptor of owner's block for importer: written whole under another name, then renamed. */
static int put_desc(rank_ctx *c, int importer, const rap_ipc_desc *d) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/d.%d.%d.tmp", c->dir, c->rank, importer);
  snprintf(path, sizeof path, "%s/d.%d.%d", c->dir, c->rank, importer);
  FILE *f = fopen(tmp, "wb");
  bool ok = f != NULL && fwrite(d, sizeof *d, 1, f) == 1;
  if (f != NULL) ok &= fclose(f) == 0;
  return ok && rename(tmp, path) == 0 ? 0 : -1;
}

static int get_desc(rank_ctx *c, int owner, rap_ipc_desc *d) {
  char path[4096];
  snprintf(path, sizeof path, "%s/d.%d.%d", c->dir, owner, c->rank);
  FILE *f = fopen(path, "rb");
  bool ok = f != NULL && fread(d, sizeof *d, 1, f) == 1;
  if (f != NULL) fclose(f);
  return ok ? 0 : -1;
}

/* Queues on the stream the count of foreign words in slot k of block p (owned by owner): the
 * owner's tag where nobody wrote (its own slot; every slot before the writes), else the writer's. */
static int count_slot(rank_ctx *c, const char *p, int owner, int k, bool written) {
  int want = k == owner || !written ? OWNER_TAG(owner) : SLOT_TAG(k);
  return gpu_count_foreign(c->s, p + (size_t)k * c->slot, c->slot, want, 0, c->counter);
}

static int count_block(rank_ctx *c, const char *p, int owner) {
  for (int k = 0; k < c->n; k++)
    if (count_slot(c, p, owner, k, true) != 0) return -1;
  return 0;
}

/* Waits for the stream and reads the counter: the foreign words found so far. */
static int settle(rank_ctx *c) {
  unsigned long long total = 0;
  if (cudaStreamSynchronize(c->s) != cudaSuccess || gpu_counter_read(c->counter, &total) != 0) return -1;
  c->foreign = total;
  return 0;
}

static int make_rank(rank_ctx *c, const char *spec) {
  char text[1024], *at = strstr(spec, "%d");
  if (at == NULL || strlen(spec) + 8 > sizeof text) return fail(c, "the spec names no device (%d)", 0);
  snprintf(text, sizeof text, "%.*s%d%s", (int)(at - spec), spec, c->rank, at + 2);
  int st = rap_manager_create(&c->rm);
  if (st == RAP_OK) st = rap_allocator_make_spec(c->rm, "pool", text, &c->pool);
  if (st == RAP_OK) st = rap_resource_create_cuda_stream(c->rm, &c->r);
  if (st != RAP_OK) return fail(c, text, st);
  c->s = rap_resource_cuda_stream(c->r);
  if (gpu_counter_create(&c->counter) != 0) return fail(c, "gpu_counter_create", 0);
  return 0;
}

/* Step 3, the owner's side: its block checked (every slot its writer's pattern), freed while
 * imported, and two more allocated, which must not be it: it stays pending for its importers. */
static int free_while_imported(rank_ctx *c, void *blk, void *more[2]) {
  rap_stats a;
  if (count_block(c, blk, c->rank) != 0 || settle(c) != 0) return fail(c, "checking its block", 0);
  int st = rap_deallocate(c->pool, blk, c->r);
  for (int k = 0; k < 2 && st == RAP_OK; k++) {
    st = rap_allocate(c->pool, &more[k], c->bytes, c->r);
    if (st == RAP_OK && (more[k] == blk || gpu_fill(c->s, more[k], c->bytes, 0xEE) != 0))
      return fail(c, "a block still imported was handed out again", 0);
  }
  if (st == RAP_OK && cudaStreamSynchronize(c->s) != cudaSuccess) st = RAP_ERR_BACKEND;
  if (st == RAP_OK) st = rap_release(c->pool);
  if (st == RAP_OK) st = rap_allocator_stats(c->pool, &a);
  if (st != RAP_OK) return fail(c, "freeing while imported", st);
  if (a.pending_bytes < c->bytes) return fail(c, "the freed block did not wait for its importers", 0);
  return 0;
}

/* Step 4, the importer's side: every slot of every imported block read again (the owners freed
 * them and allocated more meanwhile), then each closed on the stream. */
static int check_and_close(rank_ctx *c, void *imp[]) {
  for (int i = 0; i < c->n; i++)
    if (i != c->rank && count_block(c, imp[i], i) != 0) return fail(c, "a kernel on an imported block", 0);
  for (int i = 0; i < c->n; i++) {
    int st = i == c->rank ? RAP_OK : rap_ipc_close(c->rm, imp[i], c->r);
    if (st != RAP_OK) return fail(c, "rap_ipc_close", st);
  }
  return settle(c) == 0 ? 0 : fail(c, "the kernels before the closes", 0);
}

/* Step 4, the owner's side, after every close: every block back, nothing live. */
static int all_back(rank_ctx *c, void *more[2]) {
  rap_stats a;
  int st = RAP_OK;
  for (int k = 0; k < 2 && st == RAP_OK; k++) st = rap_deallocate(c->pool, more[k], c->r);
  /* The first release fences the stream's open batch (an event recorded now), the second finds it
   * passed. */
  if (st == RAP_OK) st = rap_release(c->pool);
  if (st == RAP_OK && cudaStreamSynchronize(c->s) != cudaSuccess) st = RAP_ERR_BACKEND;
  if (st == RAP_OK) st = rap_release(c->pool);
  if (st == RAP_OK) st = rap_allocator_check(c->pool);
  if (st == RAP_OK) st = rap_allocator_stats(c->pool, &a);
  if (st != RAP_OK) return fail(c, "after the closes", st);
  if (a.current_bytes != 0 || a.pending_bytes != 0 || a.allocation_count != 0) {
    printf("rank %d: after every close %zu bytes live, %zu pending, %zu blocks\n", c->rank,
           a.current_bytes, a.pending_bytes, a.allocation_count);
    return fail(c, "blocks not back after the closes", 0);
  }
  return 0;
}

/* Steps 1 and 2: the block made and exported to every other rank; the others' imported (timed),
 * their slot read, written and read again. */
static int exchange(rank_ctx *c, void **blk, void *imp[], double *open_ms) {
  int st = rap_allocate(c->pool, blk, c->bytes, c->r);
  if (st != RAP_OK) return fail(c, "rap_allocate", st);
  if (gpu_fill(c->s, *blk, c->bytes, OWNER_TAG(c->rank)) != 0 || cudaStreamSynchronize(c->s) != cudaSuccess)
    return fail(c, "filling its block", 0);
  for (int j = 0; j < c->n; j++) {
    rap_ipc_desc d;
    if (j == c->rank) continue;
    if ((st = rap_ipc_export(c->pool, *blk, &d)) != RAP_OK) return fail(c, "rap_ipc_export", st);
    if (put_desc(c, j, &d) != 0) return fail(c, "writing a descriptor", 0);
  }
  if (!wait_all(c, "exported")) return fail(c, "waiting for the exports", 0);
  double t0 = now_ms();
  for (int i = 0; i < c->n; i++) {
    rap_ipc_desc d;
    if (i == c->rank) continue;
    if (get_desc(c, i, &d) != 0) return fail(c, "reading a descriptor", 0);
    if ((st = rap_ipc_import(c->rm, &d, c->r, &imp[i])) != RAP_OK) return fail(c, "rap_ipc_import", st);
  }
  *open_ms = now_ms() - t0;
  for (int i = 0; i < c->n; i++) {
    if (i == c->rank) continue;
    char *slot = (char *)imp[i] + (size_t)c->rank * c->slot;
    if (count_slot(c, imp[i], i, c->rank, false) != 0 || gpu_fill(c->s, slot, c->slot, SLOT_TAG(c->rank)) != 0 ||
        count_slot(c, imp[i], i, c->rank, true) != 0)
      return fail(c, "a kernel on an imported block", 0);
  }
  return settle(c) == 0 ? 0 : fail(c, "the kernels on the imported blocks", 0);
}

static int run_rank(rank_ctx *c, const char *spec) {
  (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY);   /* importers are siblings, not ancestors */
  if (cudaSetDevice(c->rank) != cudaSuccess) return fail(c, "cudaSetDevice", 0);
  if (make_rank(c, spec) != 0) return 1;
  void *blk = NULL, *imp[MAX_RANKS] = {NULL}, *more[2] = {NULL, NULL};
  double open_ms = 0;
  if (exchange(c, &blk, imp, &open_ms) != 0) return 1;
  if (!wait_all(c, "written")) return fail(c, "waiting for the writes", 0);
  if (free_while_imported(c, blk, more) != 0) return 1;
  if (!wait_all(c, "freed")) return fail(c, "waiting for the frees", 0);
  if (check_and_close(c, imp) != 0) return 1;
  if (!wait_all(c, "closed")) return fail(c, "waiting for the closes", 0);
  if (all_back(c, more) != 0) return 1;
  printf("rank %d (device %d): opened %d peers' pools in %.3f ms (%d imports), foreign %llu, "
         "0 live after the closes\n", c->rank, c->rank, c->n - 1, open_ms, c->n - 1, c->foreign);
  fflush(stdout);
  gpu_counter_destroy(c->counter);
  int st = rap_resource_destroy(c->r);
  if (st == RAP_OK) st = rap_manager_destroy(c->rm);
  if (st != RAP_OK) return fail(c, "teardown", st);
  return c->foreign == 0 ? 0 : fail(c, "foreign words", 0);
}

/* ---- the launcher: one process a rank, spawned (CUDA is not forked) ----------------------------- */

static int launch(const char *self, const char *name, const char *spec, int n, size_t slot) {
  char dir[] = "/tmp/rap-a2a-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    printf("%s: mkdtemp: %s\n", name, strerror(errno));
    return 1;
  }
  printf("%s: %s on %d ranks, blocks of %d x %zu bytes\n", name, spec, n, n, slot);
  fflush(stdout);
  pid_t pids[MAX_RANKS];
  char rank[16], ranks[16], slots[32];
  snprintf(ranks, sizeof ranks, "%d", n);
  snprintf(slots, sizeof slots, "%zu", slot);
  int bad = 0;
  for (int k = 0; k < n; k++) {
    snprintf(rank, sizeof rank, "%d", k);
    char *argv[] = {(char *)self, "--rank", rank, ranks, slots, dir, (char *)spec, NULL};
    if (posix_spawn(&pids[k], self, NULL, NULL, argv, environ) != 0) {
      printf("%s: spawning rank %d failed\n", name, k);
      touch(dir, "abort", n);
      pids[k] = -1;
      bad++;
    }
  }
  for (int k = 0; k < n; k++) {
    int status = 0;
    if (pids[k] < 0) continue;
    if (waitpid(pids[k], &status, 0) != pids[k] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("%s: rank %d ended with status %d\n", name, k, status);
      touch(dir, "abort", n);
      bad++;
    }
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("%s: could not remove %s\n", name, dir);
  printf("%s: %s\n", name, bad ? "FAILED" : "passed (every rank: foreign 0, every block back)");
  fflush(stdout);
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc == 7 && strcmp(argv[1], "--rank") == 0) {
    rank_ctx c = {.rank = atoi(argv[2]), .n = atoi(argv[3]), .dir = argv[5]};
    c.slot = strtoull(argv[4], NULL, 10);
    c.bytes = c.slot * (size_t)c.n;
    return run_rank(&c, argv[6]);
  }
  const char *which = argc > 1 ? argv[1] : "all";
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices < 2) {
    printf("skipped: needs two GPUs or more (%s)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : devices == 1 ? "one here" : "none here");
    return SKIPPED;
  }
  int n = argc > 2 ? atoi(argv[2]) : devices;
  size_t slot = argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)1 << 20;
  if (n < 2 || n > devices || n > MAX_RANKS || slot == 0 || slot % 4 != 0) {
    printf("usage: %s [vmm|so|all|SPEC] [RANKS: 2..%d] [SLOT_BYTES: a multiple of 4]\n", argv[0], devices);
    return 2;
  }
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = '\0';
  int bad = 0;
  if (strcmp(which, "vmm") == 0 || strcmp(which, "all") == 0) bad += launch(self, "DeviceVmm", VMM, n, slot);
  if (strcmp(which, "so") == 0 || strcmp(which, "all") == 0) bad += launch(self, "StreamOrdered", SO, n, slot);
  if (strcmp(which, "vmm") != 0 && strcmp(which, "so") != 0 && strcmp(which, "all") != 0)
    bad += launch(self, "spec", which, n, slot);
  return bad ? 1 : 0;
}
