/* test_ipc.c — memory across processes on the host: blocks of a ResourceAwarePool over
 * HostVmm(export=posix) exported here and imported by another process (ipc_peer.c, driven through
 * pipes), the exporter's free held until the importer closed and its queued work passed or the
 * importer ended, and every bad input refused with the exporter's pool unchanged. The importer's
 * queue is gated by a pipe this process writes to: no sleeps.
 */
#define _GNU_SOURCE   /* pipe2, fdopen */
#include "ipc_driver.h"
#include "test_util.h"

#include <errno.h>
#include <stdlib.h>
#include <signal.h>

#define POOL "ResourceAwarePool(HostVmm(export=posix, reserve=1GiB))"
#define MIB ((size_t)1 << 20)

RAP_TEST(Ipc, ABlockCrossesAndComesBackOnlyAfterTheImporterClosedIt) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  uint64_t *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, MIB, NULL));
  a[0] = 0xA11CE;
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), 0xA11CE);
  PEER_OK(&p, "write %llu 8 %d", i, 0xB0B);   /* the same pages: the exporter sees it */
  RAP_CHECK_EQ(a[1], 0xB0B);
  /* The exporter frees it: pending on the import, however often the pool polls. */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  void *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &b, MIB, NULL));
  RAP_CHECK(b != (void *)a);   /* never handed out again meanwhile */
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 8", i), 0xB0B);
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Ipc, AQueuedCloseHoldsTheBlockUntilTheImportersWorkPassed) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, 3 * MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));   /* freed before the importer even opened it */
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "async");
  PEER_OK(&p, "close %llu gated", i);   /* returns at once; the close waits on the queue */
  RAP_CHECK(pending_after_poll(pool) >= 3 * MIB);
  RAP_CHECK(write(p.gate, "g", 1) == 1);   /* the importer's work passes */
  PEER_OK(&p, "sync");
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Ipc, AnImporterThatEndsWithoutClosingGivesItsBlocksBack) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = NULL, *b = NULL, *c = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &b, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &c, MIB, NULL));
  rap_ipc_desc da, db, dc;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  RAP_CHECK_OK(rap_ipc_export(pool, c, &dc));   /* never imported */
  peer p;
  peer_start(&p);
  import(&p, &da, "host");
  unsigned long long ib = import(&p, &db, "async");
  PEER_OK(&p, "close %llu gated", ib);   /* its queue never passes the gate */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK(pending_after_poll(pool) >= 3 * MIB);
  peer_end(&p, false);   /* ends: closes nothing, its queue never ran the close */
  /* Both of its blocks come back at the next poll; the descriptor nobody imported holds its own. */
  size_t left = pending_after_poll(pool);
  RAP_CHECK(left >= MIB && left < 2 * MIB);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Ipc, TwoImportersOfOneBlockBothHoldIt) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  uint64_t *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, MIB, NULL));
  a[5] = 55;
  rap_ipc_desc d1, d2;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d1));
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d2));
  peer p, q;
  peer_start(&p);
  peer_start(&q);
  unsigned long long ip = import(&p, &d1, "host"), iq = import(&q, &d2, "host");
  RAP_CHECK_EQ(PEER_OK(&q, "read %llu 40", iq), 55);
  PEER_ERR(&q, "RAP_ERR_BUSY", "imported already", "import %s host", ({
             static char h[129];
             hex(&d1, h);
             h;
           }));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  PEER_OK(&p, "close %llu host", ip);
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  PEER_OK(&q, "close %llu host", iq);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  peer_end(&p, true);
  peer_end(&q, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(Ipc, ManyBlocksOfOnePoolShareItsMappings) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HostVmm(export=posix, "
                                       "reserve=1GiB), initial_size=64MiB)", &pool));
  enum { N = 200 };
  uint64_t *blk[N];
  rap_ipc_desc d[N];
  for (int k = 0; k < N; k++) {
    RAP_CHECK_OK(rap_allocate(pool, (void **)&blk[k], 4096 + 64 * (size_t)k, NULL));
    blk[k][0] = (uint64_t)k * 7 + 1;
    RAP_CHECK_OK(rap_ipc_export(pool, blk[k], &d[k]));
  }
  peer p;
  peer_start(&p);
  for (int k = 0; k < N; k++) {
    unsigned long long i = import(&p, &d[k], "host");
    RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), (uint64_t)k * 7 + 1);
  }
  for (int k = 0; k < N; k++) RAP_CHECK_OK(rap_deallocate(pool, blk[k], NULL));
  RAP_CHECK(pending_after_poll(pool) > 0);
  for (int k = 0; k < N; k++) PEER_OK(&p, "close %d host", k);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* The exporter's block was freed on its own queue, and the queue is destroyed while the importer
 * still holds the block: it stays pending (now on the export alone) until the close. */
RAP_TEST(Ipc, TheOwnersQueueGoesWhileTheImporterHoldsTheBlock) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  rap_resource *q = NULL;
  RAP_CHECK_OK(rap_resource_create_host_async(rm, &q));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, 2 * MIB, q));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "host");
  RAP_CHECK_OK(rap_deallocate(pool, a, q));
  RAP_CHECK_OK(rap_resource_destroy(q));   /* q's work has passed; the import has not */
  RAP_CHECK(pending_after_poll(pool) >= 2 * MIB);
  void *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &b, 2 * MIB, NULL));
  RAP_CHECK(b != a);
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Wrappers above the pool pass the export down: ThreadSafe, and ThreadCache, which sends an
 * exported block back to the pool instead of caching it for its thread. */
RAP_TEST(Ipc, ThroughThreadSafeAndThreadCache) {
  rap_manager *rm = tu_manager();
  const char *specs[] = {"ThreadSafe(" POOL ")", "ThreadCache(" POOL ")"};
  for (int k = 0; k < 2; k++) {
    char name[8];
    snprintf(name, sizeof name, "w%d", k);
    rap_allocator *a = NULL;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, name, specs[k], &a));
    void *x = NULL;
    RAP_CHECK_OK(rap_allocate(a, &x, 4096, NULL));
    rap_ipc_desc d;
    RAP_CHECK_OK(rap_ipc_export(a, x, &d));
    peer p;
    peer_start(&p);
    unsigned long long i = import(&p, &d, "host");
    RAP_CHECK_OK(rap_deallocate(a, x, NULL));
    void *y = NULL;
    RAP_CHECK_OK(rap_allocate(a, &y, 4096, NULL));
    RAP_CHECK(y != x);   /* neither the thread's cache nor the pool hands it out */
    PEER_OK(&p, "close %llu host", i);
    RAP_CHECK_OK(rap_deallocate(a, y, NULL));
    peer_end(&p, true);
    RAP_CHECK_OK(rap_release(a));
    RAP_CHECK_OK(rap_allocator_check(a));
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An exporting platform maps in pieces of at most 1 GiB (the importer maps only those a block lies
 * in), and a block across two pieces arrives whole. Memfd pages are made only when touched. */
RAP_TEST(Ipc, ALargeChunkIsMappedInPiecesAndABlockAcrossThemArrives) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", "ResourceAwarePool(HostVmm(export=posix, "
                                       "reserve=8GiB), initial_size=3GiB)", &pool));
  char *a = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, ((size_t)1 << 30) - MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, (void **)&b, 2 * MIB, NULL));   /* across the first boundary */
  RAP_CHECK(b == a + ((size_t)1 << 30) - MIB);
  RAP_CHECK_EQ(stats(rap_allocator_parent(pool)).chunk_count, 3);
  ((uint64_t *)b)[0] = 11;
  ((uint64_t *)(b + 2 * MIB))[-1] = 22;
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, b, &d));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), 11);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", i, 2 * MIB - 8), 22);
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- bad input: a status, a sentence, and the exporter's pool as it was ---------------------- */

/* A descriptor nobody will import holds its block (its importer may still be on the way): the
 * exporter takes it back with rap_ipc_revoke, and a late import of it is refused. One that was
 * imported is not revoked: its importer holds the block until it closes it. */
RAP_TEST(Ipc, ADescriptorNobodyImportedIsRevokedAndItsBlockComesBack) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL, *other = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "other", POOL, &other));
  void *a = NULL, *b = NULL, *c = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &b, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &c, MIB, NULL));
  rap_ipc_desc da, db, dc;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  RAP_CHECK_OK(rap_ipc_export(pool, c, &dc));
  /* Sent to nobody: freed, it stays pending however often the pool polls. */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  RAP_CHECK_OK(rap_ipc_revoke(pool, &da));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &da), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "no longer exported");
  /* Revoked while the block is still live: an importer that comes later is refused. */
  RAP_CHECK_OK(rap_ipc_revoke(pool, &dc));
  peer p;
  peer_start(&p);
  char h[129];
  hex(&dc, h);
  PEER_ERR(&p, "RAP_ERR_NOT_FOUND", "revoked", "import %s host", h);
  /* Imported: not revoked, and the block stays held until the close. */
  unsigned long long i = import(&p, &db, "host");
  rap_stats before = stats(pool);
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &db), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), "imported the descriptor already");
  same_stats(before, stats(pool));
  /* Bad input: another pool's allocator, a corrupted descriptor, NULLs. */
  RAP_CHECK_STATUS(rap_ipc_revoke(other, &db), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "not exported from its memory");
  rap_ipc_desc bad = db;
  bad.bytes[33] ^= 1;
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "check does not match");
  RAP_CHECK_STATUS(rap_ipc_revoke(NULL, &db), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, NULL), RAP_ERR_INVALID);
  same_stats(before, stats(pool));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK(pending_after_poll(pool) >= MIB);
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_deallocate(pool, c, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(IpcBadInput, DescriptorsThatAreForgedTruncatedOrStaleAreRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  rap_stats before = stats(pool);
  char h[129];
  peer p;
  peer_start(&p);
  /* Truncated: the last bytes lost. */
  rap_ipc_desc t = d;
  memset(t.bytes + 40, 0, 24);
  hex(&t, h);
  PEER_ERR(&p, "RAP_ERR_INVALID", "check does not match", "import %s host", h);
  /* Forged: another offset, with the check made to match (the layout: offset at byte 32, the check
   * over the 48 bytes before it). */
  rap_ipc_desc f = d;
  uint64_t off, check;
  memcpy(&off, f.bytes + 32, 8);
  off += 4096;
  memcpy(f.bytes + 32, &off, 8);
  check = fnv(f.bytes, 48);
  memcpy(f.bytes + 48, &check, 8);
  hex(&f, h);
  PEER_ERR(&p, "RAP_ERR_INVALID", "forged", "import %s host", h);
  /* A stale serial: the ticket's generation is another. */
  rap_ipc_desc s = d;
  s.bytes[28] ^= 0x5a;
  check = fnv(s.bytes, 48);
  memcpy(s.bytes + 48, &check, 8);
  hex(&s, h);
  PEER_ERR(&p, "RAP_ERR_NOT_FOUND", "no longer exported", "import %s host", h);
  /* Made by another version of rap (the version at byte 4), its check intact. */
  rap_ipc_desc v = d;
  v.bytes[4] = 1;
  v.bytes[5] = 0;
  check = fnv(v.bytes, 48);
  memcpy(v.bytes + 48, &check, 8);
  hex(&v, h);
  PEER_ERR(&p, "RAP_ERR_INVALID", "another version of rap", "import %s host", h);
  /* Import in the exporting process. */
  void *q = NULL;
  RAP_CHECK_STATUS(rap_ipc_import(rm, &d, NULL, &q), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "exported by this process");
  RAP_CHECK(q == NULL);
  same_stats(before, stats(pool));
  RAP_CHECK_OK(rap_allocator_check(pool));
  /* The real one still works after all that, once; a second import is refused, and so is a double
   * close. */
  unsigned long long i = import(&p, &d, "host");
  hex(&d, h);
  PEER_ERR(&p, "RAP_ERR_BUSY", "imported already", "import %s host", h);
  PEER_OK(&p, "close %llu host", i);
  PEER_ERR(&p, "RAP_ERR_UNKNOWN_POINTER", "closed already", "close %llu host", i);
  same_stats(before, stats(pool));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(IpcBadInput, ADestroyedPoolIsRefused) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "gone", POOL, &pool));
  void *a = NULL, *b = NULL;
  RAP_CHECK_OK(rap_allocate(pool, &a, MIB, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &b, MIB, NULL));
  rap_ipc_desc da, db, dc;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &da, "host");   /* the peer has the pool open */
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  rap_allocator *platform = rap_allocator_parent(pool);
  RAP_CHECK_OK(rap_allocator_destroy(pool));
  RAP_CHECK_OK(rap_allocator_destroy(platform));
  char h[129];
  hex(&db, h);
  PEER_ERR(&p, "RAP_ERR_NOT_FOUND", "destroyed", "import %s host", h);
  /* What the peer had open stays readable there until it closes it. */
  PEER_OK(&p, "read %llu 0", i);
  PEER_OK(&p, "close %llu host", i);
  /* A process that never opened it. */
  peer q;
  peer_start(&q);
  PEER_ERR(&q, "RAP_ERR_NOT_FOUND", "", "import %s host", h);
  peer_end(&q, true);
  peer_end(&p, true);
  (void)dc;
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(IpcBadInput, ExportingWhatNoOtherProcessCanOpenIsRefused) {
  rap_manager *rm = tu_manager();
  struct {
    const char *spec, *words;
  } cases[] = {
      {"ResourceAwarePool(HOST)", "no other process can open"},
      {"ResourceAwarePool(HostVmm(reserve=1GiB))", "without export="},
      {"QuickPool(HostVmm(export=posix, reserve=1GiB))", "ResourceAwarePool"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char name[16];
    snprintf(name, sizeof name, "p%zu", k);
    rap_allocator *a = NULL;
    RAP_CHECK_OK(rap_allocator_make_spec(rm, name, cases[k].spec, &a));
    void *x = NULL;
    RAP_CHECK_OK(rap_allocate(a, &x, 4096, NULL));
    rap_stats before = stats(a);
    rap_ipc_desc d;
    RAP_CHECK_STATUS(rap_ipc_export(a, x, &d), RAP_ERR_UNSUPPORTED);
    RAP_CHECK_STR(rap_last_error(), cases[k].words);
    same_stats(before, stats(a));
    RAP_CHECK_OK(rap_allocator_check(a));
    RAP_CHECK_OK(rap_deallocate(a, x, NULL));
  }
  /* The platform's own allocation, an interior pointer, a pointer not live. */
  rap_allocator *pool = NULL, *platform = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "ok", POOL, &pool));
  platform = rap_allocator_parent(pool);
  void *x = NULL, *y = NULL;
  RAP_CHECK_OK(rap_allocate(platform, &x, 4096, NULL));
  RAP_CHECK_OK(rap_allocate(pool, &y, 4096, NULL));
  rap_stats before = stats(pool);
  rap_ipc_desc d;
  RAP_CHECK_STATUS(rap_ipc_export(platform, x, &d), RAP_ERR_UNSUPPORTED);
  RAP_CHECK_STR(rap_last_error(), "ResourceAwarePool over it");
  RAP_CHECK_STATUS(rap_ipc_export(pool, (char *)y + 64, &d), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_ipc_export(pool, NULL, &d), RAP_ERR_UNKNOWN_POINTER);
  RAP_CHECK_STATUS(rap_ipc_export(pool, y, NULL), RAP_ERR_INVALID);
  RAP_CHECK_STATUS(rap_ipc_close(rm, y, NULL), RAP_ERR_UNKNOWN_POINTER);
  same_stats(before, stats(pool));
  /* An exporting pool that no other process maps sleeps (test_ipc_sleep.c has the rest). */
  RAP_CHECK_OK(rap_ipc_export(pool, y, &d));
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  RAP_CHECK_OK(rap_allocator_check(pool));
  /* Options. */
  rap_allocator *bad = NULL;
  RAP_CHECK_STATUS(rap_allocator_make_spec(rm, "bad", "HostVmm(export=fabric)", &bad), RAP_ERR_INVALID);
  RAP_CHECK_STR(rap_last_error(), "posix or none");
  RAP_CHECK_OK(rap_deallocate(platform, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* rap_spec_check knows export= as make does: DeviceVmm's (checked without a device) and HostVmm's
 * values pass, anything else is refused with make's sentence. */
RAP_TEST(IpcBadInput, SpecCheckKnowsTheExportOption) {
  static const char *const goods[] = {
      "ResourceAwarePool(DeviceVmm(device=0, export=posix))",
      "ResourceAwarePool(DeviceVmm(device=0, export=fabric))",
      "ThreadSafe(ResourceAwarePool(DeviceVmm(export=auto)))",
      "ResourceAwarePool(DeviceVmm(export=none))",
      "ResourceAwarePool(HostVmm(export=posix, reserve=1GiB))",
      "ResourceAwarePool(StreamOrdered(pool=new, export=posix))",
      "ResourceAwarePool(StreamOrdered(export=none))",
  };
  for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++)
    if (rap_spec_check(goods[i]) != RAP_OK)
      rap_test_fail(__FILE__, __LINE__, "'%s' was refused: %s", goods[i], rap_last_error());
  static const struct {
    const char *spec, *why;
  } bads[] = {
      {"ResourceAwarePool(DeviceVmm(device=0, export=bogus))",
       "option 'export' must be posix, fabric, auto or none, not 'bogus'"},
      {"ResourceAwarePool(HostVmm(export=fabric, reserve=1GiB))",
       "option 'export' must be posix or none, not 'fabric'"},
      {"ResourceAwarePool(DeviceVmm(exprot=posix))", "did you mean 'export'?"},
      {"ResourceAwarePool(StreamOrdered(pool=new, export=fabric))",
       "option 'export' must be posix or none, not 'fabric'"},
      {"ResourceAwarePool(StreamOrdered(export=posix))", "export=posix needs pool=new"},
      {"ResourceAwarePool(StreamOrdered(pool=default, export=posix))", "export=posix needs pool=new"},
  };
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    int st = rap_spec_check(bads[i].spec);
    if (st != RAP_ERR_INVALID || !rap_test_contains(rap_last_error(), bads[i].why) ||
        !rap_test_contains(rap_last_error(), "rap_spec_check: "))
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s '%s', expected RAP_ERR_INVALID with '%s'",
                    bads[i].spec, rap_status_name(st), st ? rap_last_error() : "", bads[i].why);
  }
}

/* StreamOrdered's export= is read before a device is asked for, so a machine without one refuses
 * the same bad options with the same sentences (a build without CUDA has no StreamOrdered). */
RAP_TEST(IpcBadInput, StreamOrderedExportNeedsAPoolOfItsOwn) {
  rap_manager *rm = tu_manager();
  static const struct {
    const char *spec, *why;
  } cases[] = {
      {"StreamOrdered(export=posix)", "export=posix needs pool=new"},
      {"StreamOrdered(pool=default, export=posix)", "the device's default pool"},
      {"StreamOrdered(pool=new, export=fabric)", "option 'export' must be posix or none, not 'fabric'"},
      {"StreamOrdered(pool=new, export=bogus)", "not 'bogus'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rap_allocator *a = NULL;
    int st = rap_allocator_make_spec(rm, "so", cases[i].spec, &a);
    if (st == RAP_ERR_UNSUPPORTED && rap_test_contains(rap_last_error(), "StreamOrdered is CUDA's"))
      continue;   /* no CUDA backend in this build */
    if (st != RAP_ERR_INVALID || !rap_test_contains(rap_last_error(), cases[i].why))
      rap_test_fail(__FILE__, __LINE__, "'%s' gave %s '%s', expected RAP_ERR_INVALID with '%s'",
                    cases[i].spec, rap_status_name(st), st ? rap_last_error() : "", cases[i].why);
    RAP_CHECK(a == NULL);
  }
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
