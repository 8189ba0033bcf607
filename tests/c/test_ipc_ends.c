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
