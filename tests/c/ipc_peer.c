/* ipc_peer.c — the other process of the memory-across-processes tests (test_ipc.c): an importer
 * driven by one command a line on stdin, answering one line on stdout ("ok [value]" or "err STATUS
 * sentence"). File descriptor 3, when open, is a gate: "close I gated" queues, on its CPU queue, a
 * job that waits for one byte there before the close, so that the test decides when the importer's
 * work has passed. It also exports, so that a test can import from a process that then ends.
 *
 *   import HEX host|async    import a descriptor (128 hex digits) with no resource or on its
 *                            queue; answers its index (the first one a close left empty)
 *   read I OFF / write I OFF VALUE    a 64-bit word of block I
 *   close I host|async|gated  close with no resource (the import's own), on the queue, or on the
 *                            queue behind a job that waits for the gate
 *   drop                     destroy the queue (rap_resource_destroy); later imports and closes
 *                            that would use it pass no resource
 *   pool SPEC / alloc SIZE / export J    make an exporting pool, a block of it (answers its index
 *                            J and the number of chunks of the platform under the pool), export
 *                            block J (answers the descriptor's 128 hex digits)
 *   sync (the queue) / quit (clean) / exit (no close, no cleanup)
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

static int export_hex(rap_allocator *pool, void *ptr, char *out) {
  rap_ipc_desc d;
  int st = pool != NULL ? rap_ipc_export(pool, ptr, &d) : RAP_ERR_INVALID;
  for (size_t i = 0; st == RAP_OK && i < sizeof d.bytes; i++) sprintf(out + 2 * i, "%02x", d.bytes[i]);
  return st;
}

int main(void) {
  rap_manager *rm = NULL;
  rap_resource *q = NULL;
  rap_allocator *pool = NULL;
  if (rap_manager_create(&rm) != RAP_OK || rap_resource_create_host_async(rm, &q) != RAP_OK) return 2;
  void *blocks[1024], *mine[64];
  size_t n = 0, nmine = 0;
  char line[512], cmd[32], arg[256], how[32];
  while (fgets(line, sizeof line, stdin) != NULL) {
    unsigned long long i = 0, off = 0, value = 0;
    if (sscanf(line, "%31s", cmd) != 1) continue;
    if (strcmp(cmd, "import") == 0 && sscanf(line, "%*s %255s %31s", arg, how) == 2) {
      rap_ipc_desc d;
      void *p = NULL;
      int st = unhex(arg, &d) == 0 ? rap_ipc_import(rm, &d, strcmp(how, "host") ? q : NULL, &p)
                                   : RAP_ERR_INVALID;
      size_t k = 0;
      while (k < n && blocks[k] != NULL) k++;
      if (st == RAP_OK && k < 1024) blocks[k] = p;
      if (st == RAP_OK && k == n && n < 1024) n++;
      answer(st, k);
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
      if (st == RAP_OK) blocks[i] = NULL;
      answer(st, 0);
    } else if (strcmp(cmd, "drop") == 0 && q != NULL) {
      int st = rap_resource_destroy(q);
      if (st == RAP_OK) q = NULL;
      answer(st, 0);
    } else if (strcmp(cmd, "pool") == 0 && pool == NULL && sscanf(line, "%*s %255[^\n]", arg) == 1) {
      answer(rap_allocator_make_spec(rm, "pool", arg, &pool), 0);
    } else if (strcmp(cmd, "alloc") == 0 && pool != NULL && sscanf(line, "%*s %llu", &value) == 1 &&
               nmine < 64) {
      rap_stats s;
      int st = rap_allocate(pool, &mine[nmine], (size_t)value, NULL);
      if (st == RAP_OK) st = rap_allocator_stats(rap_allocator_parent(pool), &s);
      if (st == RAP_OK) printf("ok %zu %zu\n", nmine++, (size_t)s.chunk_count);
      else answer(st, 0);
      fflush(stdout);
    } else if (strcmp(cmd, "export") == 0 && sscanf(line, "%*s %llu", &i) == 1 && i < nmine) {
      char h[2 * sizeof(rap_ipc_desc) + 1];
      int st = export_hex(pool, mine[i], h);
      if (st == RAP_OK) printf("ok %s\n", h);
      else answer(st, 0);
      fflush(stdout);
    } else if (strcmp(cmd, "sync") == 0) {
      answer(q != NULL ? rap_resource_synchronize(q) : RAP_OK, 0);
    } else if (strcmp(cmd, "exit") == 0) {
      _exit(0);
    } else if (strcmp(cmd, "quit") == 0) {
      break;
    } else {
      printf("err RAP_ERR_INVALID unknown command: %s", line);
      fflush(stdout);
    }
  }
  int st = q != NULL ? rap_resource_destroy(q) : RAP_OK;
  for (size_t k = 0; st == RAP_OK && k < nmine; k++) st = rap_deallocate(pool, mine[k], NULL);
  if (st == RAP_OK) st = rap_manager_destroy(rm);
  return st == RAP_OK ? 0 : 1;
}
