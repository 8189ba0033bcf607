/* ipc_driver.h — drives the importer process of the memory-across-processes tests (ipc_peer.c)
 * through pipes, one command a line, for the host tests (test_ipc.c) and the CUDA ones
 * (tests/cuda/test_cuda_ipc.c), and the checks they share. File descriptor 3 of the peer is a gate
 * its CPU queue waits on ("close I gated"). */
#ifndef RAP_TEST_IPC_DRIVER_H
#define RAP_TEST_IPC_DRIVER_H

#include "shared_helpers.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

typedef struct peer {
  pid_t pid;
  FILE *in, *out;
  int gate;
} peer;

static inline void peer_start(peer *p) {
  int in[2], out[2], gate[2];
  RAP_CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 && pipe2(gate, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, gate[0], 3);
  char path[4096];
  peer_path(path, sizeof path, "rap_ipc_peer", RAP_IPC_PEER);
  char *argv[] = {path, NULL};
  int err = posix_spawn(&p->pid, path, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  close(gate[0]);
  RAP_CHECK(err == 0);
  p->in = fdopen(in[1], "w");
  p->out = fdopen(out[0], "r");
  p->gate = gate[1];
  RAP_CHECK(p->in != NULL && p->out != NULL);
}

/* Sends one command and returns the answer line (without its newline). */
static inline const char *peer_say(peer *p, char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline const char *peer_say(peer *p, char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(p->in, fmt, ap);
  va_end(ap);
  fputc('\n', p->in);
  fflush(p->in);
  if (fgets(buf, (int)cap, p->out) == NULL) rap_test_fail(__FILE__, __LINE__, "the peer did not answer");
  buf[strcspn(buf, "\n")] = '\0';
  return buf;
}

#define PEER_OK(p, ...)                                                                            \
  ({                                                                                               \
    char b_[1024];                                                                                 \
    const char *a_ = peer_say((p), b_, sizeof b_, __VA_ARGS__);                                    \
    if (strncmp(a_, "ok ", 3) != 0) rap_test_fail(__FILE__, __LINE__, "peer: %s", a_);             \
    strtoull(a_ + 3, NULL, 10);                                                                    \
  })
#define PEER_ERR(p, status, words, ...)                                                            \
  do {                                                                                             \
    char b_[1024];                                                                                 \
    const char *a_ = peer_say((p), b_, sizeof b_, __VA_ARGS__);                                    \
    if (strncmp(a_, "err " status " ", strlen("err " status " ")) != 0)                            \
      rap_test_fail(__FILE__, __LINE__, "peer answered '%s', expected %s", a_, status);            \
    RAP_CHECK_STR(a_, words);                                                                      \
  } while (0)

/* quit: the peer closes what is left and ends cleanly; else it ends at once, closing nothing. */
static inline void peer_end(peer *p, bool quit) {
  fputs(quit ? "quit\n" : "exit\n", p->in);
  fclose(p->in);
  fclose(p->out);
  close(p->gate);
  int status = 0;
  RAP_CHECK(waitpid(p->pid, &status, 0) == p->pid);
  RAP_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static inline void hex(const rap_ipc_desc *d, char *out) {
  for (size_t i = 0; i < sizeof d->bytes; i++) sprintf(out + 2 * i, "%02x", d->bytes[i]);
}

static inline unsigned long long import(peer *p, const rap_ipc_desc *d, const char *how) {
  char h[2 * sizeof d->bytes + 1];
  hex(d, h);
  return PEER_OK(p, "import %s %s", h, how);
}

static inline rap_stats stats(rap_allocator *a) {
  rap_stats s;
  RAP_CHECK_OK(rap_allocator_stats(a, &s));
  return s;
}

/* The pool polls its pending blocks (a release, as a miss would) and answers what is pending. */
static inline size_t pending_after_poll(rap_allocator *a) {
  RAP_CHECK_OK(rap_release(a));
  RAP_CHECK_OK(rap_allocator_check(a));
  return stats(a).pending_bytes;
}

static inline uint64_t fnv(const unsigned char *p, size_t n) {
  uint64_t h = UINT64_C(14695981039346656037);
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

static inline void same_stats(rap_stats a, rap_stats b) {
  RAP_CHECK(memcmp(&a, &b, sizeof a) == 0);
}

#endif /* RAP_TEST_IPC_DRIVER_H */
