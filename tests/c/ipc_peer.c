/* ipc_peer.c — the other process of the memory-across-processes tests (test_ipc.c): an importer
 * driven by one command a line on stdin, answering one line on stdout ("ok [value]" or "err STATUS
 * sentence"). File descriptor 3, when open, is a gate: "close I gated" queues, on its CPU queue, a
 * job that waits for one byte there before the close, so that the test decides when the importer's
 * work has passed.
 *
 *   import HEX host|async    import a descriptor (128 hex digits); answers its index
 *   read I OFF / write I OFF VALUE    a 64-bit word of block I
 *   close I host|async|gated / sync (the queue) / quit (clean) / exit (no close, no cleanup)
 */
#include <rap/rap.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void gate_wait(void *arg) {
  (void)arg;
  char c;
  if (read(3, &c, 1) != 1) return;
}

static int unhex(const char *s, rap_ipc_desc *d) {
  for (size_t i = 0; i < sizeof d->bytes; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
    d->bytes[i] = (unsigned char)v;
  }
  return 0;
}

static void answer(int st, unsigned long long value) {
  if (st == RAP_OK) printf("ok %llu\n", value);
  else printf("err %s %s\n", rap_status_name(st), rap_last_error());
  fflush(stdout);
}

int main(void) {
  rap_manager *rm = NULL;
  rap_resource *q = NULL;
  if (rap_manager_create(&rm) != RAP_OK || rap_resource_create_host_async(rm, &q) != RAP_OK) return 2;
  void *blocks[1024];
  size_t n = 0;
  char line[512], cmd[32], arg[256], how[32];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long long i = 0, off = 0, value = 0;
    if (sscanf(line, "%31s", cmd) != 1) continue;
    if (strcmp(cmd, "import") == 0 && sscanf(line, "%*s %255s %31s", arg, how) == 2) {
      rap_ipc_desc d;
      void *p = NULL;
      int st = unhex(arg, &d) == 0 ? rap_ipc_import(rm, &d, strcmp(how, "host") ? q : NULL, &p)
                                   : RAP_ERR_INVALID;
      if (st == RAP_OK && n < 1024) blocks[n++] = p;
      answer(st, n - 1);
    } else if (strcmp(cmd, "read") == 0 && sscanf(line, "%*s %llu %llu", &i, &off) == 2 && i < n) {
      answer(RAP_OK, *(volatile uint64_t *)((char *)blocks[i] + off));
    } else if (strcmp(cmd, "write") == 0 && sscanf(line, "%*s %llu %llu %llu", &i, &off, &value) == 3 &&
               i < n) {
      *(volatile uint64_t *)((char *)blocks[i] + off) = value;
      answer(RAP_OK, 0);
    } else if (strcmp(cmd, "close") == 0 && sscanf(line, "%*s %llu %31s", &i, how) == 2 && i < n) {
      int st = RAP_OK;
      if (strcmp(how, "gated") == 0) st = rap_resource_submit(q, gate_wait, NULL);
      if (st == RAP_OK) st = rap_ipc_close(rm, blocks[i], strcmp(how, "host") ? q : NULL);
      answer(st, 0);
    } else if (strcmp(cmd, "sync") == 0) {
      answer(rap_resource_synchronize(q), 0);
    } else if (strcmp(cmd, "exit") == 0) {
      _exit(0);
    } else if (strcmp(cmd, "quit") == 0) {
      break;
    } else {
      printf("err RAP_ERR_INVALID unknown command: %s", line);
      fflush(stdout);
    }
  }
  int st = rap_resource_destroy(q);
  if (st == RAP_OK) st = rap_manager_destroy(rm);
  return st == RAP_OK ? 0 : 1;
}
