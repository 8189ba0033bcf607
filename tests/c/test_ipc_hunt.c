/* test_ipc_hunt.c — memory across processes attacked from outside: what an importer keeps mapped
 * when the exporter gives memory back and maps new memory over the same addresses (a release, a
 * pool destroyed under an open import), and descriptors corrupted in every byte. The importer is
 * rap_ipc_peer (ipc_peer.c) driven through pipes (ipc_driver.h); a peer a failed check left
 * behind is killed and waited for by the next test here and at exit, so nothing is orphaned.
 */
#define _GNU_SOURCE   /* pipe2, fdopen */
#include "ipc_driver.h"
#include "test_util.h"

#include <signal.h>

#define KIB ((size_t)1024)
#define PLATFORM "HostVmm(export=posix, reserve=64MiB, granularity=64KiB)"
#define POOL "ResourceAwarePool(" PLATFORM ", initial_size=64KiB, next_size=64KiB)"

/* ---- peers that a failed check leaves behind are reaped ---------------------------------------- */

static peer *started[4];

static void reap_left(void) {
  for (unsigned k = 0; k < 4; k++) {
    if (started[k] == NULL) continue;
    kill(started[k]->pid, SIGKILL);
    (void)waitpid(started[k]->pid, NULL, 0);
    fclose(started[k]->in);
    fclose(started[k]->out);
    close(started[k]->gate);
    started[k] = NULL;
  }
}
__attribute__((destructor)) static void reap_at_exit(void) { reap_left(); }

static void start(peer *p) {
  peer_start(p);
  for (unsigned k = 0; k < 4; k++)
    if (started[k] == NULL) {
      started[k] = p;
      return;
    }
}

static void end(peer *p, bool quit) {
  for (unsigned k = 0; k < 4; k++)
    if (started[k] == p) started[k] = NULL;
  peer_end(p, quit);
}

static const char *hexof(const rap_ipc_desc *d, char *h) {
  hex(d, h);
  return h;
}

/* ---- what the importer keeps mapped ----------------------------------------------------------- */

/* An importer keeps a mapping after its last block there closed, for its next import. The exporter
 * gave that memory back (a release) and mapped new memory over it under another row of its table:
 * the importer's next imports must not unmap the old row's addresses under a block open in the new
 * one. (Before, importing y unmapped the second half of x there: the peer's read of it crashed.) */
RAP_TEST(IpcHunt, AMappingKeptAfterItsBlocksClosedIsNotUnmappedOverANewOne) {
  reap_left();
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  uint64_t *a0 = tu_alloc(pool, 64 * KIB), *a = tu_alloc(pool, 64 * KIB);   /* rows 0 and 1 */
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &d, "host"));   /* row 1 stays mapped there */
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, a0, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);   /* both given back */
  RAP_CHECK_EQ(stats(pool).actual_bytes, 0);
  /* x: one new mapping over both old ones (row 0); y: above them (row 1 again). */
  uint64_t *x = tu_alloc(pool, 128 * KIB), *y = tu_alloc(pool, 64 * KIB);
  RAP_CHECK(x == a0 && (char *)y == (char *)x + 128 * KIB);
  x[0] = 11;
  x[8 * KIB] = 22;   /* in what was a's mapping */
  y[0] = 33;
  rap_ipc_desc dx, dy;
  RAP_CHECK_OK(rap_ipc_export(pool, x, &dx));
  RAP_CHECK_OK(rap_ipc_export(pool, y, &dy));
  unsigned long long ix = import(&p, &dx, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", ix, 64 * KIB), 22);
  unsigned long long iy = import(&p, &dy, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", iy), 33);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", ix), 11);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", ix, 64 * KIB), 22);
  PEER_OK(&p, "write %llu %zu 44", ix, 64 * KIB + 8);
  RAP_CHECK_EQ(x[8 * KIB + 1], 44);
  PEER_OK(&p, "close %llu host", ix);
  PEER_OK(&p, "close %llu host", iy);
  end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* Destroying the exporting pool drops its tickets, and what the importer has open stays its own
 * (docs/DESIGN.md, "Teardown"). A new pool over the same platform maps new memory on the same
 * addresses: an import of its blocks must neither serve the old memory for a block at the same
 * address nor map the new memory under the block still open there. Refused (RAP_ERR_BUSY: close
 * it first) while it is open; after its close the new blocks open and read the new bytes. (Before,
 * the first import read the old bytes, and the second turned the open block's bytes into the new
 * pool's.) */
RAP_TEST(IpcHunt, ABlockOpenWhenItsPoolWentKeepsItsMemoryAndNewBlocksWait) {
  reap_left();
  rap_manager *rm = tu_manager();
  rap_allocator *platform = tu_make(rm, "platform", "HostVmm", NULL,
                                    "export=posix, reserve=64MiB, granularity=64KiB");
  rap_allocator *old = tu_make(rm, "old", "ResourceAwarePool", "platform",
                               "initial_size=64KiB, next_size=64KiB");
  uint64_t *a0 = tu_alloc(old, 64 * KIB), *a = tu_alloc(old, 64 * KIB);
  a0[0] = 1;
  a[0] = 2;
  rap_ipc_desc d0, d;
  RAP_CHECK_OK(rap_ipc_export(old, a0, &d0));
  RAP_CHECK_OK(rap_ipc_export(old, a, &d));
  peer p;
  start(&p);
  unsigned long long i0 = import(&p, &d0, "host"), i = import(&p, &d, "host");
  RAP_CHECK_OK(rap_deallocate(old, a0, NULL));
  RAP_CHECK_OK(rap_deallocate(old, a, NULL));
  RAP_CHECK_OK(rap_allocator_destroy(old));   /* the peer still has both open */
  rap_allocator *pool = tu_make(rm, "pool", "ResourceAwarePool", "platform",
                                "initial_size=128KiB, next_size=64KiB");
  uint64_t *x = tu_alloc(pool, 64 * KIB), *y = tu_alloc(pool, 64 * KIB);
  RAP_CHECK(x == a0 && y == a);   /* one new mapping (row 0) over both old ones */
  x[0] = 3;
  y[0] = 4;
  rap_ipc_desc dx, dy;
  RAP_CHECK_OK(rap_ipc_export(pool, x, &dx));
  RAP_CHECK_OK(rap_ipc_export(pool, y, &dy));
  char h[129];
  PEER_ERR(&p, "RAP_ERR_BUSY", "close it first", "import %s host", hexof(&dx, h));
  PEER_ERR(&p, "RAP_ERR_BUSY", "close it first", "import %s host", hexof(&dy, h));
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i0), 1);   /* the old bytes, still its own */
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), 2);
  RAP_CHECK_EQ(tu_stats(platform).actual_bytes, 128 * KIB);
  PEER_OK(&p, "close %llu host", i0);
  PEER_ERR(&p, "RAP_ERR_BUSY", "close it first", "import %s host", hexof(&dx, h));
  PEER_OK(&p, "close %llu host", i);
  unsigned long long ix = import(&p, &dx, "host"), iy = import(&p, &dy, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", ix), 3);
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", iy), 4);
  PEER_OK(&p, "close %llu host", ix);
  PEER_OK(&p, "close %llu host", iy);
  end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, x, NULL));
  RAP_CHECK_OK(rap_deallocate(pool, y, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- descriptors ------------------------------------------------------------------------------ */

/* Every byte of a descriptor matters: each changed alone (four ways), with its check left as it
 * was and made to match again, is refused with a sentence, by an importer that has the pool open
 * already (so that a field only a first opening reads is checked too); nothing changes for the
 * exporter, and the real descriptor still opens the block. (Before, its last 8 bytes and, with the
 * check made to match, its descriptor number of the shared table were not read: such descriptors
 * were imported.) */
RAP_TEST(IpcHunt, EveryByteOfADescriptorIsChecked) {
  reap_left();
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  uint64_t *a = tu_alloc(pool, 64 * KIB);
  a[1] = 0xD00D;
  rap_ipc_desc d;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  peer p;
  start(&p);
  PEER_OK(&p, "close %llu host", import(&p, &d, "host"));   /* the pool is open there now */
  rap_stats before = stats(pool);
  const unsigned char flips[] = {0x01, 0x80, 0xff, 0x10};
  char h[129], b[1024];
  for (int fix = 0; fix < 2; fix++)
    for (size_t at = 0; at < sizeof d.bytes; at++)
      for (size_t k = 0; k < sizeof flips; k++) {
        RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
        rap_ipc_desc c = d;
        c.bytes[at] ^= flips[k];
        if (fix && at < 48) {   /* the check: FNV-1a over the 48 bytes before it */
          uint64_t check = fnv(c.bytes, 48);
          memcpy(c.bytes + 48, &check, 8);
        }
        const char *ans = peer_say(&p, b, sizeof b, "import %s host", hexof(&c, h));
        if (strncmp(ans, "err RAP_ERR_", 12) != 0 || strstr(ans, " rap_ipc_import: ") == NULL)
          rap_test_fail(__FILE__, __LINE__, "byte %zu ^ 0x%02x (check %s) answered '%s'", at,
                        flips[k], fix ? "made to match" : "as it was", ans);
        RAP_CHECK_OK(rap_ipc_revoke(pool, &d));
      }
  RAP_CHECK_OK(rap_allocator_check(pool));
  same_stats(before, stats(pool));
  RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
  unsigned long long i = import(&p, &d, "host");
  RAP_CHECK_EQ(PEER_OK(&p, "read %llu 8", i), 0xD00D);
  PEER_OK(&p, "close %llu host", i);
  end(&p, true);
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* An export ends once its importer closed it, or ended (docs/DESIGN.md, "A descriptor nobody
 * imported"): revoking it then is RAP_ERR_NOT_FOUND, "no longer exported", as for a revoked one.
 * (Before, RAP_ERR_BUSY said the block was held until the importer closes it, which it had.) An
 * import still open is RAP_ERR_BUSY, naming the importer. */
RAP_TEST(IpcHunt, RevokingAnExportItsImporterClosedOrLeftSaysItEnded) {
  reap_left();
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  void *a = tu_alloc(pool, 64 * KIB);
  rap_ipc_desc closed, left, open;
  RAP_CHECK_OK(rap_ipc_export(pool, a, &closed));
  RAP_CHECK_OK(rap_ipc_export(pool, a, &left));
  RAP_CHECK_OK(rap_ipc_export(pool, a, &open));
  peer p, q;
  start(&p);
  start(&q);
  PEER_OK(&p, "close %llu host", import(&p, &closed, "host"));
  unsigned long long i = import(&p, &open, "host");
  import(&q, &left, "host");
  end(&q, false);   /* ends without closing */
  char want[64];
  snprintf(want, sizeof want, "process %d imported", (int)p.pid);
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &open), RAP_ERR_BUSY);
  RAP_CHECK_STR(rap_last_error(), want);
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &closed), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "no longer exported");
  RAP_CHECK_STATUS(rap_ipc_revoke(pool, &left), RAP_ERR_NOT_FOUND);
  RAP_CHECK_STR(rap_last_error(), "no longer exported");
  RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
  RAP_CHECK(pending_after_poll(pool) >= 64 * KIB);   /* the open import holds it */
  PEER_OK(&p, "close %llu host", i);
  RAP_CHECK_EQ(pending_after_poll(pool), 0);
  end(&p, true);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}

/* ---- blocks of every size --------------------------------------------------------------------- */

/* Blocks of every size class, 0 bytes to 24 MiB (many mappings of the platform's 64 KiB granule),
 * each exported, imported, read and written at both ends by the importer, and freed while open:
 * pending until its close, never handed out meanwhile, and the pool checks out at every step. */
RAP_TEST(IpcHunt, BlocksOfEverySizeCrossWithTheirBytes) {
  reap_left();
  rap_manager *rm = tu_manager();
  rap_allocator *pool = NULL;
  RAP_CHECK_OK(rap_allocator_make_spec(rm, "pool", POOL, &pool));
  peer p;
  start(&p);
  size_t sizes[64], n = 0;
  sizes[n++] = 0;
  for (size_t s = 1; s <= ((size_t)24 << 20); s = s < 8 ? s + 3 : s * 3 - s / 2) sizes[n++] = s;
  for (size_t k = 0; k < n; k++) {
    size_t s = sizes[k], last = s >= 16 ? (s - 8) & ~(size_t)7 : 8;
    char *a = tu_alloc(pool, s);
    if (s >= 16) {   /* both ends; smaller ones cross untouched */
      *(uint64_t *)a = k + 1;
      *(uint64_t *)(a + last) = k + 100;
    }
    rap_ipc_desc d;
    RAP_CHECK_OK(rap_ipc_export(pool, a, &d));
    unsigned long long i = import(&p, &d, "host");
    if (s >= 16) {
      RAP_CHECK_EQ(PEER_OK(&p, "read %llu 0", i), k + 1);
      RAP_CHECK_EQ(PEER_OK(&p, "read %llu %zu", i, last), k + 100);
      PEER_OK(&p, "write %llu %zu %zu", i, last, k + 1000);
      RAP_CHECK_EQ(*(uint64_t *)(a + last), k + 1000);
    }
    RAP_CHECK_OK(rap_deallocate(pool, a, NULL));
    RAP_CHECK(pending_after_poll(pool) >= s);
    void *other = tu_alloc(pool, s);
    RAP_CHECK(other != (void *)a);
    PEER_OK(&p, "close %llu host", i);
    RAP_CHECK_EQ(pending_after_poll(pool), 0);
    RAP_CHECK_OK(rap_deallocate(pool, other, NULL));
    RAP_CHECK_OK(rap_allocator_check(pool));
  }
  end(&p, true);
  rap_stats s = stats(pool);
  RAP_CHECK_EQ(s.current_bytes, 0);
  RAP_CHECK_EQ(s.used_bytes + s.free_bytes + s.pending_bytes, s.actual_bytes);
  RAP_CHECK_OK(rap_manager_destroy(rm));
}
