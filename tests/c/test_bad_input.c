/* test_bad_input.c — every public function against every kind of bad input, from one table.
 *
 * Each row: the function, the bad input, the status it must return, and a word its sentence in
 * rap_last_error() must contain (the function's name, or the allocator, key or name at fault).
 * Each call checks that its out-param was left alone. Around every row the statistics of every
 * allocator of the fixture (and of a second manager) are compared: a refused call changes nothing.
 * The same table is docs/errors.md: BadInput.TableMatchesDocs checks that every row is there
 * verbatim; RAP_ERRORS_MD=path writes the rows (make the doc's table from it).
 */
#include "test_util.h"

#include <rap/strategy.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bad {
  rap_manager *rm, *rm2;
  rap_allocator *host, *pool, *rap, *fault, *fixed, *limiter, *ts;
  rap_resource *hostr, *q, *q2;   /* q2 belongs to rm2 */
  void *p, *rp, *hp, *fp, *tp;    /* live: pool (100 B), rap (on q), HOST, fixed, ts */
  void *dead;                     /* a pool block already freed */
  char local[64];
} bad;

static char sentinel_obj;
#define SENT ((void *)&sentinel_obj)
#define OUT_WRITTEN 1000   /* a row returns this when its out-param was written on failure */
#define RESULT(st, out) ((st) != RAP_OK && (void *)(out) != SENT ? OUT_WRITTEN : (st))

static void noop_job(void *arg) { (void)arg; }

/* ---- the calls --------------------------------------------------------------------------------- */
#define CALL(name, ...) static int name(bad *b) { (void)b; __VA_ARGS__ }

CALL(c_mgr_create_null, return rap_manager_create(NULL);)
CALL(c_mgr_destroy_null, return rap_manager_destroy(NULL);)
CALL(c_get_null_mgr, rap_allocator *a = SENT; int st = rap_allocator_get(NULL, "HOST", &a); return RESULT(st, a);)
CALL(c_get_null_name, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, NULL, &a); return RESULT(st, a);)
CALL(c_get_null_out, return rap_allocator_get(b->rm, "HOST", NULL);)
CALL(c_get_unknown, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, "nope", &a); return RESULT(st, a);)
CALL(c_get_empty, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, "", &a); return RESULT(st, a);)
CALL(c_get_bad_device, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, "DEVICE::x", &a); return RESULT(st, a);)
CALL(c_get_huge_device, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, "DEVICE::99999", &a); return RESULT(st, a);)

#define MAKE(name, nm, strat, parent, opts)                                                        \
  CALL(name, rap_allocator *a = SENT;                                                              \
       int st = rap_allocator_make(b->rm, nm, strat, parent, opts, &a); return RESULT(st, a);)
CALL(c_make_null_mgr, rap_allocator *a = SENT; int st = rap_allocator_make(NULL, "x", "QuickPool", "HOST", NULL, &a); return RESULT(st, a);)
MAKE(c_make_null_name, NULL, "QuickPool", "HOST", NULL)
MAKE(c_make_null_strategy, "x", NULL, "HOST", NULL)
CALL(c_make_null_out, return rap_allocator_make(b->rm, "x", "QuickPool", "HOST", NULL, NULL);)
MAKE(c_make_empty_name, "", "QuickPool", "HOST", NULL)
CALL(c_make_long_name, char name[300]; memset(name, 'n', sizeof name - 1); name[sizeof name - 1] = '\0';
     rap_allocator *a = SENT; int st = rap_allocator_make(b->rm, name, "QuickPool", "HOST", NULL, &a);
     return RESULT(st, a);)
MAKE(c_make_duplicate, "pool", "QuickPool", "HOST", NULL)
MAKE(c_make_platform_name, "HOST", "QuickPool", "HOST", NULL)
MAKE(c_make_device_name, "DEVICE", "QuickPool", "HOST", NULL)
MAKE(c_make_unknown_strategy, "x", "NoSuchPool", "HOST", NULL)
MAKE(c_make_no_parent, "x", "QuickPool", NULL, NULL)
MAKE(c_make_unknown_parent, "x", "QuickPool", "nope", NULL)
MAKE(c_make_unknown_option, "x", "QuickPool", "HOST", "initail_size=1MiB")
MAKE(c_make_bad_size, "x", "QuickPool", "HOST", "initial_size=lots")
MAKE(c_make_size_overflow, "x", "QuickPool", "HOST", "initial_size=99999999999999999999")
MAKE(c_make_size_huge, "x", "QuickPool", "HOST", "initial_size=16000000TiB")
MAKE(c_make_no_value, "x", "QuickPool", "HOST", "initial_size")
MAKE(c_make_no_key, "x", "QuickPool", "HOST", "=5")
MAKE(c_make_twice, "x", "QuickPool", "HOST", "alignment=64,alignment=128")
MAKE(c_make_align_zero, "x", "QuickPool", "HOST", "alignment=0")
MAKE(c_make_align_odd, "x", "DynamicPoolList", "HOST", "alignment=48")
MAKE(c_make_heuristic, "x", "QuickPool", "HOST", "heuristic=sometimes")
MAKE(c_make_percent, "x", "QuickPool", "HOST", "heuristic=percent_releasable:101")
MAKE(c_make_blocks_zero, "x", "QuickPool", "HOST", "heuristic=blocks_releasable:0")
MAKE(c_make_cross, "x", "ResourceAwarePool", "HOST", "cross_resource=maybe")
MAKE(c_make_limit_missing, "x", "SizeLimiter", "HOST", NULL)
MAKE(c_make_limit_zero, "x", "SizeLimiter", "HOST", "limit=0")
MAKE(c_make_fixed_zero, "x", "FixedPool", "HOST", "object_size=0")
MAKE(c_make_fixed_per_chunk, "x", "FixedPool", "HOST", "object_size=64 objects_per_chunk=0")
MAKE(c_make_fault_option, "x", "Fault", "HOST", "fail_next=-1")
MAKE(c_make_threadsafe_option, "x", "ThreadSafe", "HOST", "lock=spin")

#define SPEC(name, text)                                                                            \
  CALL(name, rap_allocator *a = SENT; int st = rap_allocator_make_spec(b->rm, "x", text, &a);      \
       return RESULT(st, a);)
CALL(c_spec_null_mgr, rap_allocator *a = SENT; int st = rap_allocator_make_spec(NULL, "x", "QuickPool(HOST)", &a); return RESULT(st, a);)
CALL(c_spec_null_spec, rap_allocator *a = SENT; int st = rap_allocator_make_spec(b->rm, "x", NULL, &a); return RESULT(st, a);)
CALL(c_spec_null_out, return rap_allocator_make_spec(b->rm, "x", "QuickPool(HOST)", NULL);)
SPEC(c_spec_empty, "")
SPEC(c_spec_leaf, "HOST")
SPEC(c_spec_unclosed, "QuickPool(HOST")
SPEC(c_spec_trailing, "QuickPool(HOST) extra")
SPEC(c_spec_two_parents, "QuickPool(HOST, HOST)")
SPEC(c_spec_parent_last, "QuickPool(initial_size=1MiB, HOST)")
SPEC(c_spec_empty_value, "QuickPool(HOST, initial_size=)")
SPEC(c_spec_unknown, "NoSuchPool(HOST)")
SPEC(c_spec_inner_option, "ThreadSafe(QuickPool(HOST, bogus=1))")
SPEC(c_spec_outer_option, "ThreadSafe(QuickPool(HOST), bogus=1)")
SPEC(c_spec_unknown_leaf, "QuickPool(nope)")
CALL(c_spec_duplicate, rap_allocator *a = SENT; int st = rap_allocator_make_spec(b->rm, "pool", "QuickPool(HOST)", &a); return RESULT(st, a);)
CALL(c_speccheck_null, return rap_spec_check(NULL);)
CALL(c_speccheck_empty, return rap_spec_check("");)
CALL(c_speccheck_unclosed, return rap_spec_check("QuickPool(HOST");)
CALL(c_speccheck_leaf, return rap_spec_check("HOST");)

CALL(c_destroy_null, return rap_allocator_destroy(NULL);)
CALL(c_destroy_live, return rap_allocator_destroy(b->pool);)
CALL(c_destroy_parent, return rap_allocator_destroy(b->host);)

CALL(c_find_null_mgr, rap_allocator *a = SENT; int st = rap_allocator_find(NULL, b->p, &a); return RESULT(st, a);)
CALL(c_find_null_out, return rap_allocator_find(b->rm, b->p, NULL);)
CALL(c_find_null_ptr, rap_allocator *a = SENT; int st = rap_allocator_find(b->rm, NULL, &a); return RESULT(st, a);)
CALL(c_find_foreign, rap_allocator *a = SENT; int st = rap_allocator_find(b->rm, b->local, &a); return RESULT(st, a);)
CALL(c_find_interior, rap_allocator *a = SENT; int st = rap_allocator_find(b->rm, (char *)b->p + 8, &a); return RESULT(st, a);)
CALL(c_find_other_manager, rap_allocator *a = SENT; int st = rap_allocator_find(b->rm2, b->p, &a); return RESULT(st, a);)

#define ALLOC(name, a, bytes, r)                                                                    \
  CALL(name, void *p = SENT; int st = rap_allocate(a, &p, bytes, r); return RESULT(st, p);)
ALLOC(c_alloc_null, NULL, 64, NULL)
CALL(c_alloc_null_out, return rap_allocate(b->pool, NULL, 64, NULL);)
ALLOC(c_alloc_foreign_res, b->pool, 64, b->q2)
ALLOC(c_alloc_max_pool, b->pool, SIZE_MAX, NULL)
ALLOC(c_alloc_max_rap, b->rap, SIZE_MAX, b->q)
ALLOC(c_alloc_max_host, b->host, SIZE_MAX, NULL)
ALLOC(c_alloc_max_limiter, b->limiter, SIZE_MAX, NULL)
ALLOC(c_alloc_max_fixed, b->fixed, SIZE_MAX, NULL)
ALLOC(c_alloc_quarter, b->pool, SIZE_MAX / 4 + 1, NULL)
ALLOC(c_alloc_ptrdiff, b->host, (size_t)PTRDIFF_MAX + 1, NULL)
ALLOC(c_alloc_fixed_big, b->fixed, 65, NULL)
ALLOC(c_alloc_limit, b->limiter, 2 << 20, NULL)
CALL(c_alloc_zero, void *p = NULL; int st = rap_allocate(b->pool, &p, 0, NULL);
     if (st != RAP_OK) return st; if (p == NULL || p == b->p) return OUT_WRITTEN;
     return rap_deallocate(b->pool, p, NULL);)
CALL(c_alloc_zero_host, void *p = NULL; int st = rap_allocate(b->host, &p, 0, NULL);
     if (st != RAP_OK) return st; if (p == NULL) return OUT_WRITTEN; return rap_deallocate(b->host, p, NULL);)

CALL(c_free_null_alloc, return rap_deallocate(NULL, b->p, NULL);)
CALL(c_free_null_ptr, return rap_deallocate(b->pool, NULL, NULL);)
CALL(c_free_foreign, return rap_deallocate(b->pool, b->local, NULL);)
CALL(c_free_interior, return rap_deallocate(b->pool, (char *)b->p + 16, NULL);)
CALL(c_free_misaligned, return rap_deallocate(b->pool, (char *)b->p + 1, NULL);)
CALL(c_free_double, return rap_deallocate(b->pool, b->dead, NULL);)
CALL(c_free_other_alloc, return rap_deallocate(b->pool, b->rp, NULL);)
CALL(c_free_wrong_res, return rap_deallocate(b->rap, b->rp, b->hostr);)
CALL(c_free_foreign_res, return rap_deallocate(b->rap, b->rp, b->q2);)
CALL(c_free_host_foreign, return rap_deallocate(b->host, b->local, NULL);)
CALL(c_free_host_interior, return rap_deallocate(b->host, (char *)b->hp + 1, NULL);)
CALL(c_free_fixed_interior, return rap_deallocate(b->fixed, (char *)b->fp + 1, NULL);)
CALL(c_free_ts_foreign, return rap_deallocate(b->ts, b->local, NULL);)
CALL(c_free_limiter_foreign, return rap_deallocate(b->limiter, b->local, NULL);)

CALL(c_release_null, return rap_release(NULL);)
CALL(c_reset_peaks_null, return rap_allocator_reset_peaks(NULL);)
CALL(c_peer_null, return rap_allocator_set_peer_access(NULL, 1, 1);)
CALL(c_peer_negative, return rap_allocator_set_peer_access(b->pool, -1, 1);)
CALL(c_peer_host, return rap_allocator_set_peer_access(b->pool, 1, 1);)
CALL(c_meminfo_null_alloc, size_t f, t; return rap_allocator_memory_info(NULL, &f, &t);)
CALL(c_meminfo_null_out, size_t t; return rap_allocator_memory_info(b->pool, NULL, &t);)
CALL(c_devptr_null_alloc, void *d; return rap_device_pointer(NULL, b->p, &d);)
CALL(c_devptr_null_out, return rap_device_pointer(b->pool, b->p, NULL);)
CALL(c_trace_null_path, return rap_trace_start(NULL);)
CALL(c_trace_empty_path, return rap_trace_start("");)
CALL(c_trace_bad_path, return rap_trace_start("/nonexistent-dir/trace.jsonl");)
MAKE(c_make_limit_zero_share, "x", "SizeLimiter", "HOST", "limit=0%")
MAKE(c_make_limit_big_share, "x", "SizeLimiter", "HOST", "limit=101%")
CALL(c_get_bad_vmm_device, rap_allocator *a = SENT; int st = rap_allocator_get(b->rm, "DEVICE_VMM::x", &a); return RESULT(st, a);)
MAKE(c_make_vmm_granularity, "x", "HostVmm", NULL, "granularity=3000")
MAKE(c_make_vmm_reserve_zero, "x", "HostVmm", NULL, "reserve=0")
MAKE(c_make_vmm_peers, "x", "HostVmm", NULL, "peers=1")
MAKE(c_make_vmm_parent, "x", "HostVmm", "HOST", NULL)
MAKE(c_make_vmm_piece, "x", "HostVmm", NULL, "piece=3MiB")
MAKE(c_make_vmm_piece_export, "x", "HostVmm", NULL, "piece=2MiB export=posix")
MAKE(c_make_unmap_free_plain, "x", "QuickPool", "HOST", "unmap_free=2MiB")
CALL(c_check_null, return rap_allocator_check(NULL);)

CALL(c_record_null_alloc, return rap_record_resource(NULL, b->rp, b->q);)
CALL(c_record_null_res, return rap_record_resource(b->rap, b->rp, NULL);)
CALL(c_record_null_ptr, return rap_record_resource(b->rap, NULL, b->q);)
CALL(c_record_interior, return rap_record_resource(b->rap, (char *)b->rp + 8, b->hostr);)
CALL(c_record_dead, return rap_record_resource(b->rap, b->dead, b->q);)
CALL(c_record_foreign_res, return rap_record_resource(b->rap, b->rp, b->q2);)
CALL(c_record_quick, return rap_record_resource(b->pool, b->p, b->q);)
CALL(c_record_host, return rap_record_resource(b->host, b->hp, b->q);)

CALL(c_ptrres_null_alloc, rap_resource *r = SENT; int st = rap_pointer_resource(NULL, b->rp, &r); return RESULT(st, r);)
CALL(c_ptrres_null_out, return rap_pointer_resource(b->rap, b->rp, NULL);)
CALL(c_ptrres_null_ptr, rap_resource *r = SENT; int st = rap_pointer_resource(b->rap, NULL, &r); return RESULT(st, r);)
CALL(c_ptrres_interior, rap_resource *r = SENT; int st = rap_pointer_resource(b->rap, (char *)b->rp + 8, &r); return RESULT(st, r);)
CALL(c_ptrres_quick_dead, rap_resource *r = SENT; int st = rap_pointer_resource(b->pool, b->dead, &r); return RESULT(st, r);)

CALL(c_stats_null, rap_stats s; return rap_allocator_stats(NULL, &s);)
CALL(c_stats_null_out, return rap_allocator_stats(b->pool, NULL);)
CALL(c_rstats_null, rap_stats s; return rap_allocator_resource_stats(NULL, b->q, &s);)
CALL(c_rstats_null_res, rap_stats s; return rap_allocator_resource_stats(b->rap, NULL, &s);)
CALL(c_rstats_null_out, return rap_allocator_resource_stats(b->rap, b->q, NULL);)
CALL(c_rstats_foreign, rap_stats s; return rap_allocator_resource_stats(b->rap, b->q2, &s);)

CALL(c_host_null_mgr, rap_resource *r = SENT; int st = rap_resource_host(NULL, &r); return RESULT(st, r);)
CALL(c_host_null_out, return rap_resource_host(b->rm, NULL);)
CALL(c_async_null_mgr, rap_resource *r = SENT; int st = rap_resource_create_host_async(NULL, &r); return RESULT(st, r);)
CALL(c_async_null_out, return rap_resource_create_host_async(b->rm, NULL);)
CALL(c_submit_null_res, return rap_resource_submit(NULL, noop_job, NULL);)
CALL(c_submit_null_fn, return rap_resource_submit(b->q, NULL, NULL);)
CALL(c_sync_null, return rap_resource_synchronize(NULL);)
CALL(c_rdestroy_null, return rap_resource_destroy(NULL);)
CALL(c_rdestroy_host, return rap_resource_destroy(b->hostr);)
CALL(c_rdestroy_busy, return rap_resource_destroy(b->q);)

CALL(c_fault_null, return rap_fault_configure(NULL, "fail_next=1");)
CALL(c_fault_not_fault, return rap_fault_configure(b->pool, "fail_next=1");)
CALL(c_fault_bad_option, return rap_fault_configure(b->fault, "fail_sometimes=1");)
CALL(c_fault_bad_value, return rap_fault_configure(b->fault, "fail_next=x");)
CALL(c_fault_req_null, size_t n; return rap_fault_requests(NULL, &n);)
CALL(c_fault_req_not_fault, size_t n = 7; int st = rap_fault_requests(b->pool, &n); return st != RAP_OK && n != 7 ? OUT_WRITTEN : st;)
CALL(c_fault_req_null_out, return rap_fault_requests(b->fault, NULL);)

CALL(c_level_low, return rap_log_set_level(-1);)
CALL(c_level_high, return rap_log_set_level(5);)

static rap_strategy bad_version, bad_methods, clash;
CALL(c_reg_null_mgr, return rap_strategy_register(NULL, &clash);)
CALL(c_reg_null, return rap_strategy_register(b->rm, NULL);)
CALL(c_reg_version, return rap_strategy_register(b->rm, &bad_version);)
CALL(c_reg_methods, return rap_strategy_register(b->rm, &bad_methods);)
CALL(c_reg_clash, return rap_strategy_register(b->rm, &clash);)
CALL(c_opt_null_key, size_t v = 1; int st = rap_options_get_size(NULL, NULL, &v); return st != RAP_OK && v != 1 ? OUT_WRITTEN : st;)
CALL(c_opt_null_out, return rap_options_get_uint(NULL, "k", NULL);)
CALL(c_opt_str_null_key, const char *v = NULL; return rap_options_get_string(NULL, NULL, &v);)
CALL(c_set_alignment_null, rap_allocator_set_alignment(NULL, 64); return RAP_OK;)

typedef struct row {
  const char *fn, *input;
  int want;
  const char *mention;   /* NULL: a success, no sentence */
  int (*call)(bad *);
} row;

static const row rows[] = {
    {"rap_manager_create", "NULL out", RAP_ERR_INVALID, "rap_manager_create", c_mgr_create_null},
    {"rap_manager_destroy", "NULL manager", RAP_ERR_INVALID, "rap_manager_destroy", c_mgr_destroy_null},
    {"rap_allocator_get", "NULL manager", RAP_ERR_INVALID, "rap_allocator_get", c_get_null_mgr},
    {"rap_allocator_get", "NULL name", RAP_ERR_INVALID, "rap_allocator_get", c_get_null_name},
    {"rap_allocator_get", "NULL out", RAP_ERR_INVALID, "rap_allocator_get", c_get_null_out},
    {"rap_allocator_get", "unknown name", RAP_ERR_NOT_FOUND, "nope", c_get_unknown},
    {"rap_allocator_get", "empty name", RAP_ERR_NOT_FOUND, "''", c_get_empty},
    {"rap_allocator_get", "DEVICE::x (malformed device number)", RAP_ERR_NOT_FOUND, "DEVICE::x", c_get_bad_device},
    {"rap_allocator_get", "DEVICE::99999 (device number out of range)", RAP_ERR_NOT_FOUND, "DEVICE::99999", c_get_huge_device},
    {"rap_allocator_make", "NULL manager", RAP_ERR_INVALID, "rap_allocator_make", c_make_null_mgr},
    {"rap_allocator_make", "NULL name", RAP_ERR_INVALID, "rap_allocator_make", c_make_null_name},
    {"rap_allocator_make", "NULL strategy", RAP_ERR_INVALID, "rap_allocator_make", c_make_null_strategy},
    {"rap_allocator_make", "NULL out", RAP_ERR_INVALID, "rap_allocator_make", c_make_null_out},
    {"rap_allocator_make", "empty name", RAP_ERR_INVALID, "rap_allocator_make", c_make_empty_name},
    {"rap_allocator_make", "name of 256 characters or more", RAP_ERR_INVALID, "rap_allocator_make", c_make_long_name},
    {"rap_allocator_make", "duplicate name", RAP_ERR_EXISTS, "pool", c_make_duplicate},
    {"rap_allocator_make", "platform name (HOST)", RAP_ERR_EXISTS, "HOST", c_make_platform_name},
    {"rap_allocator_make", "platform name (DEVICE), with or without CUDA", RAP_ERR_EXISTS, "DEVICE", c_make_device_name},
    {"rap_allocator_make", "unknown strategy", RAP_ERR_NOT_FOUND, "NoSuchPool", c_make_unknown_strategy},
    {"rap_allocator_make", "NULL parent for a strategy that needs one", RAP_ERR_INVALID, "parent", c_make_no_parent},
    {"rap_allocator_make", "unknown parent", RAP_ERR_NOT_FOUND, "nope", c_make_unknown_parent},
    {"rap_allocator_make", "unknown option key", RAP_ERR_INVALID, "initail_size", c_make_unknown_option},
    {"rap_allocator_make", "malformed size", RAP_ERR_INVALID, "initial_size", c_make_bad_size},
    {"rap_allocator_make", "size that overflows 64 bits", RAP_ERR_INVALID, "initial_size", c_make_size_overflow},
    {"rap_allocator_make", "size above a quarter of the address space", RAP_ERR_INVALID, "initial_size", c_make_size_huge},
    {"rap_allocator_make", "key without a value", RAP_ERR_INVALID, "initial_size", c_make_no_value},
    {"rap_allocator_make", "value without a key", RAP_ERR_INVALID, "no key", c_make_no_key},
    {"rap_allocator_make", "option given twice", RAP_ERR_INVALID, "alignment", c_make_twice},
    {"rap_allocator_make", "alignment=0", RAP_ERR_INVALID, "alignment", c_make_align_zero},
    {"rap_allocator_make", "alignment not a power of two", RAP_ERR_INVALID, "alignment", c_make_align_odd},
    {"rap_allocator_make", "unknown heuristic", RAP_ERR_INVALID, "heuristic", c_make_heuristic},
    {"rap_allocator_make", "percentage above 100", RAP_ERR_INVALID, "heuristic", c_make_percent},
    {"rap_allocator_make", "blocks_releasable:0", RAP_ERR_INVALID, "heuristic", c_make_blocks_zero},
    {"rap_allocator_make", "cross_resource neither grow nor wait", RAP_ERR_INVALID, "cross_resource", c_make_cross},
    {"rap_allocator_make", "SizeLimiter without limit", RAP_ERR_INVALID, "limit", c_make_limit_missing},
    {"rap_allocator_make", "SizeLimiter limit=0", RAP_ERR_INVALID, "limit", c_make_limit_zero},
    {"rap_allocator_make", "FixedPool object_size=0", RAP_ERR_INVALID, "object_size", c_make_fixed_zero},
    {"rap_allocator_make", "FixedPool objects_per_chunk=0", RAP_ERR_INVALID, "objects_per_chunk", c_make_fixed_per_chunk},
    {"rap_allocator_make", "Fault fail_next=-1", RAP_ERR_INVALID, "fail_next", c_make_fault_option},
    {"rap_allocator_make", "ThreadSafe with any option", RAP_ERR_INVALID, "lock", c_make_threadsafe_option},
    {"rap_allocator_make_spec", "NULL manager", RAP_ERR_INVALID, "rap_allocator_make_spec", c_spec_null_mgr},
    {"rap_allocator_make_spec", "NULL spec", RAP_ERR_INVALID, "rap_allocator_make_spec", c_spec_null_spec},
    {"rap_allocator_make_spec", "NULL out", RAP_ERR_INVALID, "rap_allocator_make_spec", c_spec_null_out},
    {"rap_allocator_make_spec", "empty spec", RAP_ERR_INVALID, "column 1", c_spec_empty},
    {"rap_allocator_make_spec", "a bare allocator name (HOST)", RAP_ERR_INVALID, "column 1", c_spec_leaf},
    {"rap_allocator_make_spec", "unclosed parenthesis", RAP_ERR_INVALID, "column 15", c_spec_unclosed},
    {"rap_allocator_make_spec", "text after the spec", RAP_ERR_INVALID, "column 17", c_spec_trailing},
    {"rap_allocator_make_spec", "two parents", RAP_ERR_INVALID, "one parent", c_spec_two_parents},
    {"rap_allocator_make_spec", "parent after the options", RAP_ERR_INVALID, "before the options", c_spec_parent_last},
    {"rap_allocator_make_spec", "empty option value", RAP_ERR_INVALID, "value", c_spec_empty_value},
    {"rap_allocator_make_spec", "unknown strategy", RAP_ERR_NOT_FOUND, "NoSuchPool", c_spec_unknown},
    {"rap_allocator_make_spec", "unknown option of an inner allocator", RAP_ERR_INVALID, "bogus", c_spec_inner_option},
    {"rap_allocator_make_spec", "unknown option of the outer allocator (inner ones are undone)", RAP_ERR_INVALID, "bogus", c_spec_outer_option},
    {"rap_allocator_make_spec", "unknown allocator as parent", RAP_ERR_NOT_FOUND, "nope", c_spec_unknown_leaf},
    {"rap_allocator_make_spec", "duplicate name", RAP_ERR_EXISTS, "pool", c_spec_duplicate},
    {"rap_spec_check", "NULL spec", RAP_ERR_INVALID, "rap_spec_check", c_speccheck_null},
    {"rap_spec_check", "empty spec", RAP_ERR_INVALID, "column 1", c_speccheck_empty},
    {"rap_spec_check", "unclosed parenthesis", RAP_ERR_INVALID, "column 15", c_speccheck_unclosed},
    {"rap_spec_check", "a bare allocator name (HOST)", RAP_ERR_INVALID, "column 1", c_speccheck_leaf},
    {"rap_allocator_destroy", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_destroy", c_destroy_null},
    {"rap_allocator_destroy", "live blocks", RAP_ERR_BUSY, "pool", c_destroy_live},
    {"rap_allocator_destroy", "allocators over it", RAP_ERR_BUSY, "HOST", c_destroy_parent},
    {"rap_allocator_find", "NULL manager", RAP_ERR_INVALID, "rap_allocator_find", c_find_null_mgr},
    {"rap_allocator_find", "NULL out", RAP_ERR_INVALID, "rap_allocator_find", c_find_null_out},
    {"rap_allocator_find", "NULL pointer", RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find", c_find_null_ptr},
    {"rap_allocator_find", "foreign pointer", RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find", c_find_foreign},
    {"rap_allocator_find", "interior pointer", RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find", c_find_interior},
    {"rap_allocator_find", "another manager's block", RAP_ERR_UNKNOWN_POINTER, "rap_allocator_find", c_find_other_manager},
    {"rap_allocate", "NULL allocator", RAP_ERR_INVALID, "rap_allocate", c_alloc_null},
    {"rap_allocate", "NULL out", RAP_ERR_INVALID, "rap_allocate", c_alloc_null_out},
    {"rap_allocate", "another manager's resource", RAP_ERR_INVALID, "rap_allocate", c_alloc_foreign_res},
    {"rap_allocate", "SIZE_MAX bytes from a pool", RAP_ERR_NOMEM, "pool", c_alloc_max_pool},
    {"rap_allocate", "SIZE_MAX bytes from a ResourceAwarePool", RAP_ERR_NOMEM, "rap", c_alloc_max_rap},
    {"rap_allocate", "SIZE_MAX bytes from HOST", RAP_ERR_NOMEM, "HOST", c_alloc_max_host},
    {"rap_allocate", "SIZE_MAX bytes from a SizeLimiter", RAP_ERR_NOMEM, "limiter", c_alloc_max_limiter},
    {"rap_allocate", "SIZE_MAX bytes from a FixedPool", RAP_ERR_INVALID, "fixed", c_alloc_max_fixed},
    {"rap_allocate", "SIZE_MAX/4 + 1 bytes from a pool", RAP_ERR_NOMEM, "pool", c_alloc_quarter},
    {"rap_allocate", "PTRDIFF_MAX + 1 bytes from HOST", RAP_ERR_NOMEM, "HOST: the host has no", c_alloc_ptrdiff},
    {"rap_allocate", "more than a FixedPool's object size", RAP_ERR_INVALID, "object size", c_alloc_fixed_big},
    {"rap_allocate", "past a SizeLimiter's limit", RAP_ERR_NOMEM, "limit", c_alloc_limit},
    {"rap_allocate", "zero bytes from a pool: a unique pointer", RAP_OK, NULL, c_alloc_zero},
    {"rap_allocate", "zero bytes from HOST: a unique pointer", RAP_OK, NULL, c_alloc_zero_host},
    {"rap_deallocate", "NULL allocator", RAP_ERR_INVALID, "rap_deallocate", c_free_null_alloc},
    {"rap_deallocate", "NULL pointer: nothing happens", RAP_OK, NULL, c_free_null_ptr},
    {"rap_deallocate", "foreign pointer", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_foreign},
    {"rap_deallocate", "interior pointer", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_interior},
    {"rap_deallocate", "misaligned pointer", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_misaligned},
    {"rap_deallocate", "double free", RAP_ERR_UNKNOWN_POINTER, "double free", c_free_double},
    {"rap_deallocate", "another allocator's block", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_other_alloc},
    {"rap_deallocate", "wrong resource (ResourceAwarePool)", RAP_ERR_WRONG_RESOURCE, "rap_deallocate", c_free_wrong_res},
    {"rap_deallocate", "another manager's resource", RAP_ERR_INVALID, "rap_deallocate", c_free_foreign_res},
    {"rap_deallocate", "foreign pointer to HOST", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_host_foreign},
    {"rap_deallocate", "interior pointer to HOST", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_host_interior},
    {"rap_deallocate", "interior pointer to a FixedPool", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_fixed_interior},
    {"rap_deallocate", "foreign pointer to a ThreadSafe", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_ts_foreign},
    {"rap_deallocate", "foreign pointer to a SizeLimiter", RAP_ERR_UNKNOWN_POINTER, "rap_deallocate", c_free_limiter_foreign},
    {"rap_release", "NULL allocator", RAP_ERR_INVALID, "rap_release", c_release_null},
    {"rap_allocator_reset_peaks", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_reset_peaks", c_reset_peaks_null},
    {"rap_allocator_set_peer_access", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_set_peer_access", c_peer_null},
    {"rap_allocator_set_peer_access", "negative device", RAP_ERR_INVALID, "not a device number", c_peer_negative},
    {"rap_allocator_set_peer_access", "host memory", RAP_ERR_UNSUPPORTED, "host memory", c_peer_host},
    {"rap_allocator_memory_info", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_memory_info", c_meminfo_null_alloc},
    {"rap_allocator_memory_info", "NULL free", RAP_ERR_INVALID, "rap_allocator_memory_info", c_meminfo_null_out},
    {"rap_device_pointer", "NULL allocator", RAP_ERR_INVALID, "rap_device_pointer", c_devptr_null_alloc},
    {"rap_device_pointer", "NULL out", RAP_ERR_INVALID, "rap_device_pointer", c_devptr_null_out},
    {"rap_trace_start", "NULL path", RAP_ERR_INVALID, "rap_trace_start", c_trace_null_path},
    {"rap_trace_start", "empty path", RAP_ERR_INVALID, "rap_trace_start", c_trace_empty_path},
    {"rap_trace_start", "a path that cannot be written", RAP_ERR_BACKEND, "rap_trace_start", c_trace_bad_path},
    {"rap_allocator_make", "SizeLimiter limit=0%", RAP_ERR_INVALID, "limit", c_make_limit_zero_share},
    {"rap_allocator_make", "SizeLimiter limit=101%", RAP_ERR_INVALID, "limit", c_make_limit_big_share},
    {"rap_allocator_get", "DEVICE_VMM::x (malformed device number)", RAP_ERR_NOT_FOUND, "DEVICE_VMM::N", c_get_bad_vmm_device},
    {"rap_allocator_make", "HostVmm granularity not a power of two", RAP_ERR_INVALID, "'granularity'", c_make_vmm_granularity},
    {"rap_allocator_make", "HostVmm reserve=0", RAP_ERR_INVALID, "'reserve'", c_make_vmm_reserve_zero},
    {"rap_allocator_make", "HostVmm peers= (host memory)", RAP_ERR_UNSUPPORTED, "'peers'", c_make_vmm_peers},
    {"rap_allocator_make", "HostVmm with a parent", RAP_ERR_INVALID, "takes no parent", c_make_vmm_parent},
    {"rap_allocator_make", "HostVmm piece not a power of two", RAP_ERR_INVALID, "'piece'", c_make_vmm_piece},
    {"rap_allocator_make", "HostVmm piece= with export=", RAP_ERR_UNSUPPORTED, "'piece'", c_make_vmm_piece_export},
    {"rap_allocator_make", "a pool's unmap_free= over a platform without pieces", RAP_ERR_INVALID, "'unmap_free'", c_make_unmap_free_plain},
    {"rap_allocator_check", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_check", c_check_null},
    {"rap_record_resource", "NULL allocator", RAP_ERR_INVALID, "rap_record_resource", c_record_null_alloc},
    {"rap_record_resource", "NULL resource", RAP_ERR_INVALID, "rap_record_resource", c_record_null_res},
    {"rap_record_resource", "NULL pointer", RAP_ERR_UNKNOWN_POINTER, "rap_record_resource", c_record_null_ptr},
    {"rap_record_resource", "interior pointer", RAP_ERR_UNKNOWN_POINTER, "rap_record_resource", c_record_interior},
    {"rap_record_resource", "freed pointer", RAP_ERR_UNKNOWN_POINTER, "rap_record_resource", c_record_dead},
    {"rap_record_resource", "another manager's resource", RAP_ERR_INVALID, "rap_record_resource", c_record_foreign_res},
    {"rap_record_resource", "a strategy without resources (QuickPool)", RAP_ERR_UNSUPPORTED, "rap_record_resource", c_record_quick},
    {"rap_record_resource", "a platform allocator (HOST)", RAP_ERR_UNSUPPORTED, "rap_record_resource", c_record_host},
    {"rap_pointer_resource", "NULL allocator", RAP_ERR_INVALID, "rap_pointer_resource", c_ptrres_null_alloc},
    {"rap_pointer_resource", "NULL out", RAP_ERR_INVALID, "rap_pointer_resource", c_ptrres_null_out},
    {"rap_pointer_resource", "NULL pointer", RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource", c_ptrres_null_ptr},
    {"rap_pointer_resource", "interior pointer", RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource", c_ptrres_interior},
    {"rap_pointer_resource", "freed pointer (QuickPool)", RAP_ERR_UNKNOWN_POINTER, "rap_pointer_resource", c_ptrres_quick_dead},
    {"rap_allocator_stats", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_stats", c_stats_null},
    {"rap_allocator_stats", "NULL out", RAP_ERR_INVALID, "rap_allocator_stats", c_stats_null_out},
    {"rap_allocator_resource_stats", "NULL allocator", RAP_ERR_INVALID, "rap_allocator_resource_stats", c_rstats_null},
    {"rap_allocator_resource_stats", "NULL resource", RAP_ERR_INVALID, "rap_allocator_resource_stats", c_rstats_null_res},
    {"rap_allocator_resource_stats", "NULL out", RAP_ERR_INVALID, "rap_allocator_resource_stats", c_rstats_null_out},
    {"rap_allocator_resource_stats", "another manager's resource", RAP_ERR_INVALID, "rap_allocator_resource_stats", c_rstats_foreign},
    {"rap_resource_host", "NULL manager", RAP_ERR_INVALID, "rap_resource_host", c_host_null_mgr},
    {"rap_resource_host", "NULL out", RAP_ERR_INVALID, "rap_resource_host", c_host_null_out},
    {"rap_resource_create_host_async", "NULL manager", RAP_ERR_INVALID, "rap_resource_create_host_async", c_async_null_mgr},
    {"rap_resource_create_host_async", "NULL out", RAP_ERR_INVALID, "rap_resource_create_host_async", c_async_null_out},
    {"rap_resource_submit", "NULL resource", RAP_ERR_INVALID, "rap_resource_submit", c_submit_null_res},
    {"rap_resource_submit", "NULL function", RAP_ERR_INVALID, "rap_resource_submit", c_submit_null_fn},
    {"rap_resource_synchronize", "NULL resource", RAP_ERR_INVALID, "rap_resource_synchronize", c_sync_null},
    {"rap_resource_destroy", "NULL resource", RAP_ERR_INVALID, "rap_resource_destroy", c_rdestroy_null},
    {"rap_resource_destroy", "the host resource", RAP_ERR_INVALID, "rap_resource_destroy", c_rdestroy_host},
    {"rap_resource_destroy", "a resource that owns live blocks", RAP_ERR_BUSY, "rap_resource_destroy", c_rdestroy_busy},
    {"rap_fault_configure", "NULL allocator", RAP_ERR_INVALID, "rap_fault_configure", c_fault_null},
    {"rap_fault_configure", "not a Fault allocator", RAP_ERR_INVALID, "rap_fault_configure", c_fault_not_fault},
    {"rap_fault_configure", "unknown option", RAP_ERR_INVALID, "fail_sometimes", c_fault_bad_option},
    {"rap_fault_configure", "malformed number", RAP_ERR_INVALID, "fail_next", c_fault_bad_value},
    {"rap_fault_requests", "NULL allocator", RAP_ERR_INVALID, "rap_fault_requests", c_fault_req_null},
    {"rap_fault_requests", "not a Fault allocator", RAP_ERR_INVALID, "rap_fault_requests", c_fault_req_not_fault},
    {"rap_fault_requests", "NULL out", RAP_ERR_INVALID, "rap_fault_requests", c_fault_req_null_out},
    {"rap_log_set_level", "level below RAP_LOG_DEBUG", RAP_ERR_INVALID, "rap_log_set_level", c_level_low},
    {"rap_log_set_level", "level above RAP_LOG_OFF", RAP_ERR_INVALID, "rap_log_set_level", c_level_high},
    {"rap_strategy_register", "NULL manager", RAP_ERR_INVALID, "rap_strategy_register", c_reg_null_mgr},
    {"rap_strategy_register", "NULL strategy", RAP_ERR_INVALID, "rap_strategy_register", c_reg_null},
    {"rap_strategy_register", "another table version", RAP_ERR_UNSUPPORTED, "rap_strategy_register", c_reg_version},
    {"rap_strategy_register", "a required method missing", RAP_ERR_INVALID, "rap_strategy_register", c_reg_methods},
    {"rap_strategy_register", "a name that exists (any case)", RAP_ERR_EXISTS, "quickpool", c_reg_clash},
    {"rap_options_get_size", "NULL key", RAP_ERR_INVALID, "rap_options_get_size", c_opt_null_key},
    {"rap_options_get_uint", "NULL out", RAP_ERR_INVALID, "rap_options_get_uint", c_opt_null_out},
    {"rap_options_get_string", "NULL key", RAP_ERR_INVALID, "rap_options_get_string", c_opt_str_null_key},
    {"rap_allocator_set_alignment", "NULL allocator: nothing happens", RAP_OK, NULL, c_set_alignment_null},
};

enum { NROWS = sizeof rows / sizeof rows[0] };

/* ---- the fixture -------------------------------------------------------------------------------- */

/* Methods of the strategy tables given to rap_strategy_register: never called. */
static int dummy_init(rap_allocator *self, void *state, rap_options *opts) {
  (void)self, (void)state, (void)opts;
  return RAP_OK;
}
static void dummy_fini(rap_allocator *self, void *state) { (void)self, (void)state; }
static int dummy_allocate(void *state, void **out, size_t bytes, rap_resource *r) {
  (void)state, (void)out, (void)bytes, (void)r;
  return RAP_ERR_NOMEM;
}
static int dummy_deallocate(void *state, void *ptr, rap_resource *r) {
  (void)state, (void)ptr, (void)r;
  return RAP_ERR_UNKNOWN_POINTER;
}
static int dummy_stats(void *state, rap_stats *out) {
  (void)state, (void)out;
  return RAP_OK;
}
static int dummy_owns(void *state, const void *ptr) {
  (void)state, (void)ptr;
  return 0;
}

static void setup(bad *b) {
  memset(b, 0, sizeof *b);
  b->rm = tu_manager();
  b->rm2 = tu_manager();
  b->host = tu_get(b->rm, "HOST");
  b->pool = tu_make(b->rm, "pool", "QuickPool", "HOST", "initial_size=64KiB");
  b->rap = tu_make(b->rm, "rap", "ResourceAwarePool", "HOST", "initial_size=64KiB");
  b->fault = tu_make(b->rm, "fault", "Fault", "HOST", NULL);
  b->fixed = tu_make(b->rm, "fixed", "FixedPool", "HOST", "object_size=64 objects_per_chunk=16");
  b->limiter = tu_make(b->rm, "limiter", "SizeLimiter", "HOST", "limit=1MiB");
  b->ts = tu_make(b->rm, "ts", "ThreadSafe", "pool", NULL);
  RAP_CHECK_OK(rap_resource_host(b->rm, &b->hostr));
  RAP_CHECK_OK(rap_resource_create_host_async(b->rm, &b->q));
  RAP_CHECK_OK(rap_resource_create_host_async(b->rm2, &b->q2));
  b->p = tu_alloc(b->pool, 100);
  RAP_CHECK_OK(rap_allocate(b->rap, &b->rp, 100, b->q));
  b->hp = tu_alloc(b->host, 100);
  b->fp = tu_alloc(b->fixed, 64);
  b->tp = tu_alloc(b->ts, 100);
  b->dead = tu_alloc(b->pool, 200);
  RAP_CHECK_OK(rap_deallocate(b->pool, b->dead, NULL));
  tu_fill(b->p, 100, 1);
  tu_fill(b->hp, 100, 2);
  tu_fill(b->fp, 64, 3);
  tu_fill(b->tp, 100, 4);
  /* Strategy tables: a complete one under a taken name, one of another version, one missing methods. */
  memset(&clash, 0, sizeof clash);
  clash.version = RAP_STRATEGY_VERSION;
  clash.name = "quickpool";
  clash.init = dummy_init;
  clash.fini = dummy_fini;
  clash.allocate = dummy_allocate;
  clash.deallocate = dummy_deallocate;
  clash.stats = dummy_stats;
  clash.owns = dummy_owns;
  bad_version = clash;
  bad_version.name = "BadVersion";
  bad_version.version = RAP_STRATEGY_VERSION + 1;
  bad_methods = clash;
  bad_methods.name = "BadMethods";
  bad_methods.owns = NULL;
}

static void teardown(bad *b) {
  RAP_CHECK(tu_intact(b->p, 100, 1));
  RAP_CHECK(tu_intact(b->hp, 100, 2));
  RAP_CHECK(tu_intact(b->fp, 64, 3));
  RAP_CHECK(tu_intact(b->tp, 100, 4));
  RAP_CHECK_OK(rap_deallocate(b->pool, b->p, NULL));
  RAP_CHECK_OK(rap_deallocate(b->rap, b->rp, NULL));
  RAP_CHECK_OK(rap_deallocate(b->host, b->hp, NULL));
  RAP_CHECK_OK(rap_deallocate(b->fixed, b->fp, NULL));
  RAP_CHECK_OK(rap_deallocate(b->ts, b->tp, NULL));
  RAP_CHECK_OK(rap_manager_destroy(b->rm));   /* nothing leaked, nothing left behind */
  RAP_CHECK_OK(rap_manager_destroy(b->rm2));
}

typedef struct snapshot {
  rap_stats s[8];
  rap_stats rq;   /* the rap pool's view of q */
  int log_level;
} snapshot;

static void snap(bad *b, snapshot *out) {
  rap_allocator *all[] = {b->host, b->pool, b->rap, b->fault, b->fixed, b->limiter, b->ts};
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) out->s[i] = tu_stats(all[i]);
  RAP_CHECK_OK(rap_allocator_resource_stats(b->rap, b->q, &out->rq));
  out->log_level = rap_log_get_level();
}

static bool exists(rap_manager *rm, const char *name) {
  rap_allocator *a = NULL;
  return rap_allocator_get(rm, name, &a) == RAP_OK;
}

static void check_row(bad *b, const row *r) {
  snapshot before, after;
  snap(b, &before);
  rap_error_set(RAP_OK, "%s", "(unchanged)");
  int st = r->call(b);
  char sentence[512];
  snprintf(sentence, sizeof sentence, "%s", rap_last_error());
  if (st != r->want)
    rap_test_fail(__FILE__, __LINE__, "%s (%s) returned %s, the table says %s (last error: %s)", r->fn,
                  r->input, st == OUT_WRITTEN ? "its out-param written" : rap_status_name(st),
                  rap_status_name(r->want), sentence);
  if (r->mention != NULL) {
    if (strcmp(sentence, "(unchanged)") == 0 || sentence[0] == '\0')
      rap_test_fail(__FILE__, __LINE__, "%s (%s) failed without a sentence", r->fn, r->input);
    if (!rap_test_contains(sentence, r->mention))
      rap_test_fail(__FILE__, __LINE__, "%s (%s): '%s' does not mention '%s'", r->fn, r->input, sentence,
                    r->mention);
    /* The user's sentence names what they called, never a function of rap's insides. */
    if (rap_test_contains(sentence, "rapi_"))
      rap_test_fail(__FILE__, __LINE__, "%s (%s): '%s' names an internal function", r->fn, r->input, sentence);
  }
  snap(b, &after);
  if (r->want == RAP_OK)   /* a zero-byte block came and went: only the peaks and the platform's
                              count of calls may have moved */
    for (int i = 0; i < 8; i++) {
      before.s[i].high_watermark = after.s[i].high_watermark;
      before.s[i].actual_high_watermark = after.s[i].actual_high_watermark;
      before.s[i].maps = after.s[i].maps;
      before.rq.maps = after.rq.maps;
      before.rq.unmaps = after.rq.unmaps;
      before.s[i].unmaps = after.s[i].unmaps;
    }
  if (memcmp(&before, &after, sizeof before) != 0)
    rap_test_fail(__FILE__, __LINE__, "%s (%s) changed the statistics", r->fn, r->input);
  /* Nothing registered by a failed make: neither the name nor an inner allocator of a spec. */
  RAP_CHECK(!exists(b->rm, "x"));
  RAP_CHECK(!exists(b->rm, "x/QuickPool"));
  RAP_CHECK(!exists(b->rm, "x/ThreadSafe"));
  rap_allocator *all[] = {b->host, b->pool, b->rap, b->fault, b->fixed, b->limiter, b->ts};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) RAP_CHECK_OK(rap_allocator_check(all[i]));
}

RAP_TEST(BadInput, EveryRowGetsItsStatusAndSentenceAndChangesNothing) {
  bad b;
  int level = rap_log_get_level();
  rap_log_set_level(RAP_LOG_OFF);   /* the rows that log (a refused chunk) stay quiet */
  setup(&b);
  for (int i = 0; i < NROWS; i++) check_row(&b, &rows[i]);
  teardown(&b);
  rap_log_set_level(level);
}

/* docs/errors.md holds every row verbatim as "| `fn` | input | STATUS |". */
static void row_line(const row *r, char *buf, size_t cap) {
  snprintf(buf, cap, "| `%s` | %s | `%s` |", r->fn, r->input, rap_status_name(r->want));
}

RAP_TEST(BadInput, TableMatchesDocs) {
  const char *out = getenv("RAP_ERRORS_MD");
  if (out != NULL) {
    FILE *f = fopen(out, "w");
    RAP_CHECK(f != NULL);
    for (int i = 0; i < NROWS; i++) {
      char line[512];
      row_line(&rows[i], line, sizeof line);
      fprintf(f, "%s\n", line);
    }
    fclose(f);
  }
  /* The source tree, from this file's path (CMake compiles it by absolute path). */
  char path[1024];
  snprintf(path, sizeof path, "%s", __FILE__);
  char *cut = strstr(path, "tests/c/test_bad_input.c");
  if (cut == NULL) RAP_SKIP("built without an absolute source path: %s", __FILE__);
  snprintf(cut, sizeof path - (size_t)(cut - path), "docs/errors.md");
  FILE *f = fopen(path, "r");
  if (f == NULL) rap_test_fail(__FILE__, __LINE__, "cannot open %s", path);
  static char doc[1 << 17];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = '\0';
  for (int i = 0; i < NROWS; i++) {
    char line[512];
    row_line(&rows[i], line, sizeof line);
    if (!rap_test_contains(doc, line)) rap_test_fail(__FILE__, __LINE__, "docs/errors.md lacks: %s", line);
  }
}
