/* test_ipc_sleep.c — sleep and wake of a pool whose memory other processes may map
 * (HostVmm(export=posix)): it sleeps when no other process maps any of it, answers RAP_ERR_BUSY
 * naming the process while one does (a block open there, or a mapping kept after its blocks
 * closed), changing nothing, and sleeps once that is gone; after a wake the table publishes the
 * new memory, so a later import reads the woken bytes and sees the exporter's writes. The importer
 * is rap_ipc_peer, driven through pipes (ipc_driver.h).
 */
#define _GNU_SOURCE   /* pipe2, fdopen */
#include "ipc_driver.h"
#include "test_util.h"

#include <stdio.h>

#define POOL "ResourceAwarePool(HostVmm(export=posix, reserve=1GiB, granularity=64KiB), initial_size=1MiB)"
#define KIB ((size_t)1024)

static rap_allocator *exporting_pool(rap_manager *rm) {
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  return pool;
}

static size_t mapped(rap_allocator *pool) { return stats(rap_allocator_parent(pool)).actual_bytes; }

/* The sentence of a refusal names the importing process. */
static void check_names(pid_t pid, const char *words) {
  char want[64];
  snprintf(want, sizeof want, "process %d maps", (int)pid);
  RAP_CHECK_STR(rap_last_error(), want);
  RAP_CHECK_STR(rap_last_error(), words);
  RAP_CHECK_STR(rap_last_error(), "stays awake and whole");
}

RAP_TEST(IpcSleep, WithNoImporterItSleepsAndWakesWithItsBytes) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = exporting_pool(rm);
  char *a = tu_alloc(pool, 300 * KIB);
  tu_fill(a, 300 * KIB, 5);
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));   /* exported, imported by nobody yet */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(mapped(pool), 0);
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK(tu_intact(a, 300 * KIB, 5));
  /* The descriptor made before the sleep opens the new memory: what the exporter writes now. */
  ((uint64_t *)a)[3] = 0xFEED;
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 24", i), 0xFEED);
  PEER_OK(&p, "write %llu 32 %d", i, 0xBEEF);
  RAP_CHECK_EQ(((uint64_t *)a)[4], 0xBEEF);
  PEER_OK(&p, "close %llu host", i);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

RAP_TEST(IpcSleep, AnImporterHoldingABlockKeepsThePoolAwakeUntilItCloses) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = exporting_pool(rm);
  uint64_t *a = NULL;
  RAP_CHECK_OK(rap_allocate(pool, (void **)&a, 64 * KIB, NULL));
  a[0] = 0xA11CE;
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  peer_start(&p);
  unsigned long long i = import(&p, &d, "host");
  rap_stats before = stats(pool);
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP), RAP_ERR_BUSY);
  check_names(p.pid, "1 imported block open");
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  same_stats(before, stats(pool));
  RAP_CHECK(mapped(pool) > 0);
  /* Still one memory in both processes, and the pool still serves. */
  PEER_OK(&p, "write %llu 8 %d", i, 0xB0B);
  RAP_CHECK_EQ(a[1], 0xB0B);
  void *more = tu_alloc(pool, 1000);
  RAP_CHECK_OK(rap_deallocate(pool, more, NULL));
  RAP_CHECK_OK(rap_allocator_check(pool));
  /* Closed (on the host: nothing of it is queued): the mapping goes with it, and the pool sleeps. */
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_EQ(mapped(pool), 0);
  rap_ipc_desc late;   /* exported before the wake: it names the block, not the memory */
  RAP_CHECK_STATUS(rap_ipc_export(pool, a, &late), RAP_ERR_BUSY);   /* the pool is asleep */
  RAP_CHECK_OK(rap_allocator_wake(pool));
  RAP_CHECK_EQ(a[0], 0xA11CE);
  RAP_CHECK_EQ(a[1], 0xB0B);
  a[2] = 0xC0FFEE;   /* written into the woken memory: an import must see it */
  RAP_CHECK_OK(rap_ipc_export(pool, a, &late));
  unsigned long long j = import(&p, &late, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 16", j), 0xC0FFEE);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 8", j), 0xB0B);
  PEER_OK(&p, "write %llu 24 %d", j, 0xD00D);
  RAP_CHECK_EQ(a[3], 0xD00D);
  PEER_OK(&p, "close %llu host", j);
  peer_end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An importer keeps a mapping after its last close while no pool of the platform ever slept (the
 * next import of a block there then costs no mapping): the first sleep is refused, saying so, and
 * from then on the importer lets a mapping go at its next import or close, or as soon as its last
 * block there closes. */
RAP_TEST(IpcSleep, AMappingKeptAfterItsBlocksClosedGoesAtTheImportersNextCall) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = exporting_pool(rm);
  char *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);
  rap_ipc_desc da, db;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  peer p;
  peer_start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &da, "host"));   /* kept mapped: nobody sleeps yet */
  RAP_CHECK_STATUS(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD), RAP_ERR_BUSY);
  check_names(p.pid, "with no block of its own open there");
  RAP_CHECK_EQ(rap_allocator_is_asleep(pool), 0);
  PEER_OK(&p, "close %llu host", import(&p, &db, "host"));   /* its next call lets both go */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_DISCARD));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  peer_end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* RAP_SLEEP_PREPARE tells importers ahead: their last close lets the mapping go at once, so the
 * first sleep after it finds nothing mapped elsewhere. An importer that ended maps nothing. */
RAP_TEST(IpcSleep, PrepareLetsImportersGoAtTheirLastClose) {
  rap_manager *rm = tu_manager();
  rap_allocator *pool = exporting_pool(rm);
  char *a = tu_alloc(pool, 4096), *b = tu_alloc(pool, 4096);
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_PREPARE));
  rap_ipc_desc da, db;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &da));
  RAP_CHECK_OK(rap_ipc_export(pool, b, &db));
  peer p, q;
  peer_start(&p);
  peer_start(&q);
  PEER_OK(&p, "close %llu host", import(&p, &da, "host"));
  import(&q, &db, "host");
  peer_end(&q, false);   /* ends with its block open and mapped: it maps nothing now */
  RAP_CHECK_OK(rap_release(pool));   /* the pool polls: q's block comes back */
  RAP_CHECK_OK(rap_allocator_sleep(pool, RAP_SLEEP_BACKUP));
  RAP_CHECK_OK(rap_allocator_wake(pool));
  peer_end(&p, true);
  RAP_CHECK_OK(rap_allocator_check(pool));
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, b, NULL));
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
