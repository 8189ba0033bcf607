/* replay.c — runs the fuzz driver without libFuzzer: over files and directories (the corpus, and
 * every crash kept in it), or over N pseudo-random inputs from a fixed seed (--random N [SEED]).
 * ctest runs both, so `make test` (and the ASan and TSan suites) replay the corpus.
 * --keep-going (first) runs each input in a child process and lists every one that fails, instead
 * of stopping at the first: for triage, not for ctest. --thread-cache (first, or after
 * --keep-going) gives every random input the configuration bits that put a ThreadCache in its
 * stack (fuzz_driver.c: byte 1's bits 4-7 equal to 8, byte 3's bits 6-7 clear).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void fz_report(FILE *out);

/* Sizes near SIZE_MAX are asked for on purpose: under ASan they must fail, not abort. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static size_t replayed, failed;
static int keep_going, thread_cache;
extern int rap_fuzz_vmm;   /* fuzz_driver.c: HostVmm in HOST's place */

/* One input, in a child process when keep_going: a failure is listed, and the run goes on. */
static void run_one(const char *what, const uint8_t *buf, size_t len) {
  if (!keep_going) {
    LLVMFuzzerTestOneInput(buf, len);
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    LLVMFuzzerTestOneInput(buf, len);
    _exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    failed++;
    fprintf(stderr, "rap fuzz replay: FAILED %s\n", what);
  }
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *b = realloc(buf, cap);
      if (b == NULL) abort();
      buf = b;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) break;
  }
  fclose(f);
  if (getenv("RAP_FUZZ_TRACE")) fprintf(stderr, "== %s\n", path);
  run_one(path, buf, len);
  free(buf);
  replayed++;
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) {
    perror(path);
    return 1;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path);
  DIR *d = opendir(path);
  if (d == NULL) {
    perror(path);
    return 1;
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, (n + 1) * sizeof *names);
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (names == NULL || names[n] == NULL) abort();
    snprintf(names[n++], len, "%s/%s", path, e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof *names, cmp);   /* the same order every time */
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    rc |= run_file(names[i]);
    free(names[i]);
  }
  free(names);
  return rc;
}

static uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * UINT64_C(2685821657736338717);
}

static size_t random_input(uint64_t seed, size_t i, uint8_t *buf, size_t cap) {
  uint64_t s = seed * 1000003u + i + 1;
  size_t len = 6 + next(&s) % (cap - 6);
  for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)(next(&s) >> 56);
  if (thread_cache) {
    buf[1] = (uint8_t)((buf[1] & 0x0Fu) | 0x80u);
    buf[3] &= 0x3Fu;
  }
  return len;
}

int main(int argc, char **argv) {
  int rc = 0;
  if (argc >= 2 && strcmp(argv[1], "--keep-going") == 0) {
    keep_going = 1;
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  if (argc >= 2 && strcmp(argv[1], "--vmm") == 0) {
    rap_fuzz_vmm = 1;
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  if (argc >= 2 && strcmp(argv[1], "--thread-cache") == 0) {
    thread_cache = 1;
    argv[1] = argv[0];
    argc--;
    argv++;
  }
  if (argc >= 4 && strcmp(argv[1], "--emit") == 0) {   /* seeds for a corpus: --emit DIR N [SEED] */
    size_t count = strtoull(argv[3], NULL, 10);
    uint64_t seed = argc >= 5 ? strtoull(argv[4], NULL, 10) : 20240601;
    uint8_t buf[3000];
    for (size_t i = 0; i < count; i++) {
      size_t len = random_input(seed, i, buf, sizeof buf);
      char path[4096];
      snprintf(path, sizeof path, "%s/seed-%04zu", argv[2], i);
      FILE *f = fopen(path, "wb");
      if (f == NULL || fwrite(buf, 1, len, f) != len) {
        perror(path);
        return 1;
      }
      fclose(f);
    }
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "--random") == 0) {
    size_t count = strtoull(argv[2], NULL, 10);
    uint64_t seed = argc >= 4 ? strtoull(argv[3], NULL, 10) : 20240601;
    uint8_t buf[3000];
    for (size_t i = 0; i < count; i++) {
      size_t len = random_input(seed, i, buf, sizeof buf);
      if (getenv("RAP_FUZZ_TRACE")) fprintf(stderr, "== random input %zu\n", i);
      char what[64];
      snprintf(what, sizeof what, "random input %zu", i);
      run_one(what, buf, len);
      replayed++;
    }
  } else if (argc < 2) {
    fprintf(stderr, "usage: %s [--keep-going] [--vmm] CORPUS_DIR_OR_FILE... | [--keep-going] [--vmm] "
            "[--thread-cache] --random N [SEED] | [--thread-cache] --emit DIR N [SEED]\n", argv[0]);
    return 2;
  } else {
    for (int i = 1; i < argc; i++) rc |= run_path(argv[i]);
  }
  if (keep_going) {
    printf("rap fuzz replay: %zu inputs, %zu failed\n", replayed, failed);
    return failed ? 1 : rc;
  }
  printf("rap fuzz replay: %zu inputs, no mismatch\n", replayed);
  fz_report(stdout);
  return rc;
}
