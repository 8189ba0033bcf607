/* test_ipc_ends.c — memory across processes when something ends before the other side expected
 * it: the importer's queue destroyed while an import on it is open, the exporting process dying
 * while an importer still asks for its blocks, and the exports of a block that lives on after
 * each importer closed it (or after the exporter revoked it), whose slots must come back. Also
 * the sentences of two refusals: a forged descriptor that names no process, and an export of a
 * pointer that is not a live block. The other process is rap_ipc_peer (ipc_peer.c), driven
 * through pipes as in test_ipc.c.
 */
#define _GNU_SOURCE   /* pipe2, fdopen */
#include "ipc_driver.h"
#include "test_util.h"

#define POOL "ResourceAwarePool(HostVmm(export=posix, reserve=1GiB))"
#define MIB ((size_t)1 << 20)

/* The peer's answer to "export J": the descriptor it printed. */
static rap_ipc_desc peer_export(peer *p, unsigned j) {
  char b[1024];
  const char *a = peer_say(p, b, sizeof b, "export %u", j);
  if (strncmp(a, "ok ", 3) != 0) rap_test_fail(__FILE__, __LINE__, "peer: %s", a);
  rap_ipc_desc d;
  for (size_t i = 0; i < sizeof d.bytes; i++) {
    unsigned v = 0;
    RAP_CHECK(sscanf(a + 3 + 2 * i, "%2x", &v) == 1);
    d.bytes[i] = (unsigned char)v;
  }
  return d;
}

/* The peer's "alloc SIZE": the block's index; *chunks the chunks of the platform under its pool. */
static unsigned peer_alloc(peer *p, size_t size, unsigned *chunks) {
  char b[1024];
  const char *a = peer_say(p, b, sizeof b, "alloc %zu", size);
  unsigned j = 0;
  if (sscanf(a, "ok %u %u", &j, chunks) != 2) rap_test_fail(__FILE__, __LINE__, "peer: %s", a);
  return j;
}

/* The importer's queue is the resource a close without one uses: while an import given it is
 * open, destroying the queue is refused with a sentence naming the import, and the close that
 * follows uses a queue that is still there. (Before, the destroy answered RAP_OK and the close
 * read the freed queue: a heap-use-after-free under ASan, in the peer.) */
RAP_TEST(IpcEnds, TheImportersQueueIsNotDestroyedUnderAnOpenImport) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "async");   /* the import's resource: the peer's queue */
  char said[1024], b[1024];
  snprintf(said, sizeof said, "%s", peer_say(&p, b, sizeof b, "drop"));
  PEER_OK(&p, "close %llu host", i);   /* no resource: the import's own queue */
  if (strncmp(said, "err RAP_ERR_BUSY ", 17) != 0)
    rap_test_fail(__FILE__, __LINE__, "destroying the queue of an open import answered '%s'", said);
  RAP_CHECK_STR(said, "rap_resource_destroy: ");
  RAP_CHECK_STR(said, "rap_ipc_import");
  RAP_CHECK_STR(said, "rap_ipc_close");
  PEER_OK(&p, "sync");
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  PEER_OK(&p, "drop");   /* closed: the queue goes */
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* One block that lives on, exported to 5 000 consumers in turn, each importing and closing it,
 * and as often exported and revoked: each export's slot comes back once its importer closed it or
 * its exporter revoked it (4 096 open at once is the most). Then 4 100 live blocks, each exported
 * and revoked: the slots of blocks that live on come back too. Then the slots of imports whose
 * importer ended without closing them. */
RAP_TEST(IpcEnds, ExportSlotsComeBackWhileTheirBlockLivesOn) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HostVmm(export=posix, "
                                       "reserve=1GiB), initial_size=64MiB)", &pool));
  uint64_t *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, MIB, NULL));
  peer p;
  peer_start(&p);
  for (unsigned k = 0; k < 5000; k++) {
    a[0] = k;
    rap_ipc_desc d, r;
    RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
    unsigned long long i = import(&p, &d, "host");
    RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), k);
    PEER_OK(&p, "close %llu host", i);
    RAP_CHECK_OK(rap_ipc_export(pool, a, &r));
    RAP_CHECK_OK(rap_ipc_revoke(pool, &r));
  }
  peer_end(&p, true);
  enum { N = 4100 };
  void **blk = malloc(N * sizeof *blk);
  RAP_CHECK(blk != NULL);
  for (unsigned k = 0; k < N; k++) {
    rap_ipc_desc d;
    RAP_CHECK_OK(rap_allocate(pool, &blk[k], 4096, NULL));
    RAP_CHECK_OK(rap_ipc_export(pool, blk[k], &d));
    RAP_CHECK_OK(rap_ipc_revoke(pool, &d));
  }
  RAP_CHECK_OK(rap_allocator_check(pool));
  for (unsigned k = 0; k < N; k++) RAP_CHECK_OK(rap_deallocate(pool, blk[k], NULL));
  free(blk);
  /* 4 096 imports open at once hold every slot; their importer ends without closing them, and the
   * next export finds their slots free. */
  peer_start(&p);
  for (unsigned k = 0; k < 4096; k++) {
    rap_ipc_desc d;
    RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
    import(&p, &d, "host");
  }
  rap_ipc_desc d;
  RAP_CHECK_STATUS(rap_ipc_export(pool, a, &d), RAP_ERR_NOMEM);
  RAP_CHECK_STR(rap_last_error(), "has 4096 exports open");
  peer_end(&p, false);
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  RAP_CHECK_OK(rap_ipc_revoke(pool, &d));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The exporting process ends (without cleaning up, as a crash would) after this one opened its
 * pool: a descriptor of a mapping this process has not opened, and one of a mapping it has, are
 * both RAP_ERR_NOT_FOUND, saying the exporter is gone; a block opened before stays readable and
 * closes. */
RAP_TEST(IpcEnds, ImportsFromAnExporterThatEndedAreNotFound) {
  rap_manager *rm = tu_manager();
  peer p;
  peer_start(&p);
  PEER_OK(&p, "pool ResourceAwarePool(HostVmm(export=posix, reserve=1GiB), initial_size=2MiB)");
  unsigned chunks = 0;
  unsigned ja = peer_alloc(&p, MIB, &chunks), jc = peer_alloc(&p, 4096, &chunks);
  RAP_CHECK_EQ(chunks, 1);
  unsigned jb = peer_alloc(&p, 8 * MIB, &chunks);   /* a mapping of its own */
  RAP_CHECK_EQ(chunks, 2);
  rap_ipc_desc da = peer_export(&p, ja), dc = peer_export(&p, jc), db = peer_export(&p, jb);
  uint64_t *x = NULL;
  RAP_CHECK_OK(rap_ipc_import(rm, &da, NULL, (void **)&x));
  x[0] = 77;
  peer_end(&p, false);   /* ends at once: closes nothing, marks nothing gone */
  void *y = NULL;
  RAP_CHECK_STATUS(rap_ipc_import(rm, &dc, NULL, &y), RAP_ERR_NOT_FOUND);   /* mapped here */
  RAP_CHECK_STR(rap_last_error(), "exporting process");
  RAP_CHECK_STR(rap_last_error(), "is gone");
  RAP_CHECK_STATUS(rap_ipc_import(rm, &db, NULL, &y), RAP_ERR_NOT_FOUND);   /* not mapped here */
  RAP_CHECK_STR(rap_last_error(), "exporting process");
  RAP_CHECK_STR(rap_last_error(), "is gone");
  RAP_CHECK(y == NULL);
  RAP_CHECK_EQ(x[0], 77);
  RAP_CHECK_OK(rap_ipc_close(rm, x, NULL));
  /* A manager that never opened the pool. */
  rap_manager *other = tu_manager();
  RAP_CHECK_STATUS(rap_ipc_import(other, &dc, NULL, &y), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "is gone");
  RAP_CHECK_OK(rap_manager_destroy(other));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* A forged descriptor whose check matches but which names no process (pid 0 or negative) is not
 * one rap_ipc_export made: RAP_ERR_INVALID, before any system call. */
RAP_TEST(IpcEnds, ADescriptorThatNamesNoProcessIsInvalid) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  rap_stats before = stats(pool);
  const int32_t pids[] = {0, -1, INT32_MIN};
  for (size_t k = 0; k < sizeof pids / sizeof pids[0]; k++) {
    rap_ipc_desc f = d;   /* the pid at byte 8, the check over the 48 bytes before byte 48 */
    memcpy(f.bytes + 8, &pids[k], 4);
    uint64_t check = fnv(f.bytes, 48);
    memcpy(f.bytes + 48, &check, 8);
    void *q = NULL;
    RAP_CHECK_STATUS(rap_ipc_import(rm, &f, NULL, &q), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), "rap_ipc_import: ");
    RAP_CHECK_STR(rap_last_error(), "names no process");
    RAP_CHECK(q == NULL);
    RAP_CHECK_STATUS(rap_ipc_revoke(pool, &f), RAP_ERR_INVALID);
    RAP_CHECK_STR(rap_last_error(), "rap_ipc_revoke: ");
  }
  same_stats(before, stats(pool));
  RAP_CHECK_OK(rap_ipc_revoke(pool, &d));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An export of a pointer that is not a live block of the allocator says so under the export's
 * name, not under the call it makes inside (rap_record_resource), through a wrapper too. */
RAP_TEST(IpcEnds, ExportingAPointerThatIsNotALiveBlockSaysSoAsExport) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *safe = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "safe", "ThreadSafe(" POOL ")", &safe));
  rap_allocator *as[] = {pool, safe};
  for (size_t k = 0; k < 2; k++) {
    char *y = NULL, *z = NULL;
    RAP_CHECK_OK(rap_allocate(as[k], (void **)&y, 4096, NULL));
    RAP_CHECK_OK(rap_allocate(as[k], (void **)&z, 4096, NULL));
    RAP_CHECK_OK(rap_deallocate(as[k], z, NULL));
    char want[64];
    snprintf(want, sizeof want, "rap_ipc_export('%s'): ", rap_allocator_name(as[k]));
    rap_stats before = stats(as[k]);
    rap_ipc_desc d;
    void *bad[] = {y + 64, z, (char *)&d};
    const char *words[] = {"points 64 bytes into", "", "not handed out"};
    for (size_t j = 0; j < 3; j++) {
      RAP_CHECK_STATUS(rap_ipc_export(as[k], bad[j], &d), RAP_ERR_UNKNOWN_POINTER);
      RAP_CHECK_STR(rap_last_error(), want);
      RAP_CHECK_STR(rap_last_error(), words[j]);
      if (rap_test_contains(rap_last_error(), "rap_record_resource"))
        rap_test_fail(__FILE__, __LINE__, "the sentence names another call: %s", rap_last_error());
    }
    same_stats(before, stats(as[k]));
    RAP_CHECK_OK(rap_deallocate(as[k], y, NULL));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
