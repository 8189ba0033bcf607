// test_rap_hpp.cpp — rap.hpp on the host: RAII handles free what they own exactly once, moves hand
// ownership over, failures throw rap::error with the C status and rap_last_error()'s sentence, and
// pools over HOST behave through the wrapper as through the C API on the host and on host_async
// queues. Every test ends by closing its manager, which throws if a block leaked.
#include <rap/rap.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

static_assert(!std::is_copy_constructible_v<rap::manager>, "a manager has one owner");
static_assert(!std::is_copy_constructible_v<rap::allocator>, "an allocator has one owner");
static_assert(!std::is_copy_constructible_v<rap::resource>, "a resource has one owner");
static_assert(std::is_nothrow_move_constructible_v<rap::manager>);
static_assert(std::is_nothrow_move_constructible_v<rap::allocator>);
static_assert(std::is_nothrow_move_assignable_v<rap::resource>);
static_assert(std::is_copy_constructible_v<rap::allocator_ref>, "views copy");
static_assert(std::is_base_of_v<std::runtime_error, rap::error>);
static_assert(std::is_base_of_v<rap::error, rap::out_of_memory>);

namespace {

// Work for a host_async queue that waits until the test opens the gate: a queue kept busy on
// purpose, with no sleeps.
class gate {
 public:
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    c_.wait(l, [this] { return open_; });
  }
  void open() {
    std::lock_guard<std::mutex> l(m_);
    open_ = true;
    c_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable c_;
  bool open_ = false;
};

// Runs expr, which must throw rap::error with status want; gives the error back.
template <class F>
rap::error expect_error(F &&f, int want) {
  try {
    f();
  } catch (const rap::error &e) {
    EXPECT_EQ(e.status(), want) << e.what();
    return e;
  }
  ADD_FAILURE() << "no rap::error thrown; expected " << rap_status_name(want);
  return rap::error(RAP_OK, "");
}

}  // namespace

TEST(CppManager, AllocatesFromHostAndClosesClean) {
  rap::manager m;
  ASSERT_NE(m.get(), nullptr);
  rap::allocator_ref host = m.allocator("HOST");
  EXPECT_STREQ(host.name(), "HOST");
  void *p = host.allocate(100);
  std::memset(p, 7, 100);
  EXPECT_EQ(m.find(p), host);
  EXPECT_EQ(host.stats().current_bytes, 100u);
  host.deallocate(p);
  EXPECT_EQ(host.stats().current_bytes, 0u);
  m.close();
  EXPECT_EQ(m.get(), nullptr);
  m.close();   // a second close has nothing to do
}

TEST(CppError, CarriesStatusAndSentence) {
  rap::manager m;
  rap::error e = expect_error([&] { m.make_spec("p", "QuickPool(HOST, no_such_option=1)"); },
                              RAP_ERR_INVALID);
  EXPECT_STREQ(e.name(), "RAP_ERR_INVALID");
  EXPECT_STREQ(e.sentence(), rap_last_error());   // the sentence the C call left, whole
  EXPECT_GT(std::strlen(e.sentence()), 0u);
  EXPECT_NE(std::strstr(e.sentence(), "no_such_option"), nullptr) << e.sentence();
  EXPECT_EQ(std::string(e.what()), std::string("RAP_ERR_INVALID: ") + e.sentence());

  expect_error([&] { m.make_spec("p", "NoSuchStrategy(HOST)"); }, RAP_ERR_NOT_FOUND);
  expect_error([&] { m.allocator("nobody"); }, RAP_ERR_NOT_FOUND);
  expect_error([] { rap::check_spec("QuickPool(HOST"); }, RAP_ERR_INVALID);
  rap::check_spec("QuickPool(HOST, initial_size=1MiB)");
  m.make_spec("p", "QuickPool(HOST)");
  rap::error dup = expect_error([&] { m.make_spec("p", "QuickPool(HOST)"); }, RAP_ERR_EXISTS);
  EXPECT_NE(std::strstr(dup.sentence(), "p"), nullptr) << dup.sentence();
  m.close();
}

TEST(CppError, BadFreesThrowAndChangeNothing) {
  rap::manager m;
  rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
  void *p = pool.allocate(64);
  int local = 0;
  expect_error([&] { pool.deallocate(&local); }, RAP_ERR_UNKNOWN_POINTER);
  EXPECT_EQ(pool.stats().allocation_count, 1u);
  pool.deallocate(p);
  expect_error([&] { pool.deallocate(p); }, RAP_ERR_UNKNOWN_POINTER);   // the second free
  pool.deallocate(nullptr);                                             // like free(NULL)
  pool.check();
  EXPECT_EQ(pool.stats().allocation_count, 0u);
  pool.destroy();
  m.close();
}

TEST(CppError, OutOfMemoryIsItsOwnType) {
  rap::manager m;
  rap::allocator lim(m, "lim", "SizeLimiter(HOST, limit=1MiB)");
  void *p = lim.allocate(512 << 10);
  try {
    (void)lim.allocate(1 << 20);
    ADD_FAILURE() << "a request over the limit was granted";
  } catch (const rap::out_of_memory &e) {
    EXPECT_EQ(e.status(), RAP_ERR_NOMEM);
    EXPECT_STREQ(e.sentence(), rap_last_error());
    const std::runtime_error &base = e;   // also a rap::error and a std::runtime_error
    EXPECT_NE(std::strstr(base.what(), "RAP_ERR_NOMEM: "), nullptr);
  }
  EXPECT_EQ(lim.stats().current_bytes, size_t{512} << 10);   // the refusal changed nothing
  lim.deallocate(p);
  m.close();
}

TEST(CppAllocator, OwnerDestroysOnceAndMovesHandOver) {
  rap::manager m;
  {
    rap::allocator a(m, "a", "QuickPool(HOST)");
    rap::allocator b(std::move(a));
    EXPECT_EQ(a.get(), nullptr);
    EXPECT_STREQ(b.name(), "a");
    rap::allocator c(m, "c", "QuickPool", "HOST", "initial_size=64KiB");
    c = std::move(b);   // c's own allocator "c" goes now; "a" is c's
    expect_error([&] { m.allocator("c"); }, RAP_ERR_NOT_FOUND);
    EXPECT_STREQ(c.name(), "a");
  }   // "a" goes here, once
  expect_error([&] { m.allocator("a"); }, RAP_ERR_NOT_FOUND);
  rap::allocator again(m, "a", "QuickPool(HOST)");   // the name is free again
  EXPECT_STREQ(again.strategy(), "QuickPool");
  EXPECT_EQ(again.parent(), m.allocator("HOST"));
  m.close();
}

TEST(CppAllocator, DestroyWithLiveBlocksThrowsBusyAndKeepsOwning) {
  rap::manager m;
  rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
  void *p = pool.allocate(1000);
  rap::error e = expect_error([&] { pool.destroy(); }, RAP_ERR_BUSY);
  EXPECT_NE(std::strstr(e.sentence(), "pool"), nullptr) << e.sentence();
  ASSERT_NE(pool.get(), nullptr);
  pool.deallocate(p);
  EXPECT_GT(pool.stats().actual_bytes, 0u);
  pool.release();
  EXPECT_EQ(pool.stats().actual_bytes, 0u);
  pool.destroy();
  EXPECT_EQ(pool.get(), nullptr);
  m.close();
}

TEST(CppManager, CloseReportsALeakAsBusy) {
  std::string logged;
  rap_log_set_handler([](int, const char *msg, void *user) { *static_cast<std::string *>(user) += msg; },
                      &logged);
  rap::manager m;
  rap::allocator_ref pool = m.make_spec("leaky", "QuickPool(HOST, initial_size=1MiB)");
  (void)pool.allocate(256);
  rap::error e = expect_error([&] { m.close(); }, RAP_ERR_BUSY);
  rap_log_set_handler(nullptr, nullptr);
  EXPECT_EQ(m.get(), nullptr);   // destroyed all the same
  EXPECT_NE(logged.find("'leaky'"), std::string::npos) << logged;
}

// A name that answers to the same RAP_ALLOCATOR_<NAME> variable as an allocator already made (the
// platform a spec names, here HOST) is taken, whatever its case: the sentence names the variable.
// (CppCuda.PinnedResourceServesTheHostAndTheDevice threw this for "pinned" over PINNED.)
TEST(CppManager, ANameOfAPlatformInOtherCase) {
  rap::manager m;
  rap::error e = expect_error([&] { rap::allocator host(m, "host", "QuickPool(HOST)"); }, RAP_ERR_EXISTS);
  EXPECT_NE(std::string(e.what()).find("RAP_ALLOCATOR_HOST"), std::string::npos) << e.what();
  rap::allocator fine(m, "host_pool", "QuickPool(HOST)");
  EXPECT_STREQ(fine.name(), "host_pool");
}

TEST(CppManager, MovesHandOverTheRegistry) {
  rap::manager a;
  rap::allocator_ref pool = a.make_spec("pool", "QuickPool(HOST)");
  rap::manager b(std::move(a));
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(b.allocator("pool"), pool);
  rap::manager c;
  c = std::move(b);   // c's own registry goes; pool's stays
  EXPECT_EQ(c.allocator("pool"), pool);
  c.close();
}

TEST(CppResource, HostAsyncPendingUntilItsWorkPasses) {
  rap::manager m;
  rap::allocator pool(m, "rap", "ResourceAwarePool(HOST, initial_size=1MiB)");
  rap::resource q = rap::resource::host_async(m);
  EXPECT_STREQ(q.kind(), "host_async");
  EXPECT_STREQ(m.host().kind(), "host");
  gate g;
  void *p = pool.allocate(4096, q);
  EXPECT_EQ(pool.owner(p), q);
  q.submit([&g] { g.wait(); });   // the queue is busy until the gate opens
  pool.deallocate(p, q);
  EXPECT_EQ(pool.stats().pending_bytes, 4096u);
  EXPECT_EQ(pool.stats(q).pending_count, 1u);
  void *other = pool.allocate(4096);   // the host may not take the pending block
  EXPECT_NE(other, p);
  void *again = pool.allocate(4096, q);   // its own queue may, at once
  EXPECT_EQ(again, p);
  pool.deallocate(again, q);
  pool.deallocate(other);
  g.open();
  q.synchronize();
  pool.release();   // polls: the pending block is free now
  EXPECT_EQ(pool.stats().pending_bytes, 0u);
  pool.check();
  q.destroy();
  EXPECT_EQ(q.get(), nullptr);
  pool.destroy();
  m.close();
}

TEST(CppResource, WrongResourceThrowsAndRecordKeepsBlockPending) {
  rap::manager m;
  rap::allocator pool(m, "rap", "ResourceAwarePool(HOST, initial_size=1MiB)");
  rap::resource q1 = rap::resource::host_async(m);
  rap::resource q2 = rap::resource::host_async(m);
  void *p = pool.allocate(512, q1);
  expect_error([&] { pool.deallocate(p, q2); }, RAP_ERR_WRONG_RESOURCE);
  EXPECT_EQ(pool.stats().allocation_count, 1u);   // the refusal changed nothing
  gate g;
  q2.submit([&g] { g.wait(); });
  pool.record(p, q2);         // p is used on q2 too
  pool.deallocate(p);         // its owner, found from the pointer
  q1.synchronize();           // q1 has passed, q2 has not
  pool.release();
  EXPECT_EQ(pool.stats().pending_bytes, 512u);
  g.open();
  q2.synchronize();
  pool.release();
  EXPECT_EQ(pool.stats().pending_bytes, 0u);
  pool.destroy();
  m.close();
}

TEST(CppResource, SubmitRunsCallablesInOrderAndMovesHandOver) {
  rap::manager m;
  rap::resource q = rap::resource::host_async(m);
  std::string order;
  for (char c : std::string("abc")) q.submit([&order, c] { order += c; });
  struct counter {
    static void bump(void *p) { ++*static_cast<int *>(p); }
  };
  int n = 0;
  q.submit(&counter::bump, &n);
  rap::resource moved(std::move(q));
  EXPECT_EQ(q.get(), nullptr);
  moved.synchronize();
  EXPECT_EQ(order, "abc");
  EXPECT_EQ(n, 1);
  rap::resource other = rap::resource::host_async(m);
  other = std::move(moved);   // other's own queue goes now
  other.synchronize();
  int ran = 0;
  m.host().submit([&ran] { ran = 1; });   // the host resource runs work at once
  EXPECT_EQ(ran, 1);
  expect_error([] { rap::resource_ref().submit([] {}); }, RAP_ERR_INVALID);
  m.close();
}

TEST(CppAllocator, StatsPeaksAndMemoryInfo) {
  rap::manager m;
  rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
  void *p = pool.allocate(3000);
  pool.deallocate(p);
  rap::stats s = pool.stats();
  EXPECT_EQ(s.high_watermark, 3000u);
  EXPECT_EQ(s.current_bytes, 0u);
  pool.reset_peaks();
  EXPECT_EQ(pool.stats().high_watermark, 0u);
  rap::memory_info mi = pool.memory_info();
  EXPECT_GT(mi.total_bytes, 0u);
  EXPECT_LE(mi.free_bytes, mi.total_bytes);
  EXPECT_FALSE(pool.asleep());
  void *live = pool.allocate(8);
  try {   // host memory has no device view: INVALID, or UNSUPPORTED in a build without CUDA
    (void)pool.device_pointer(live);
    ADD_FAILURE() << "HOST memory got a device pointer";
  } catch (const rap::error &e) {
    EXPECT_TRUE(e.status() == RAP_ERR_INVALID || e.status() == RAP_ERR_UNSUPPORTED) << e.what();
  }
  pool.deallocate(live);
  m.close();
}

TEST(CppManager, HandlesThatOutliveItDestroyNothing) {
  rap::allocator pool;
  rap::resource q;
  {
    rap::manager m;
    pool = rap::allocator(m, "pool", "QuickPool(HOST)");
    q = m.host_async();
    pool.deallocate(pool.allocate(10, q), q);
    q.synchronize();
    rap::manager moved(std::move(m));   // the handles follow the registry, not the object
    moved.close();
  }
  // The manager took both with it; the handles know, and neither touches freed memory (ASan
  // checks this) nor complains.
  EXPECT_NO_THROW(pool.destroy());
  EXPECT_EQ(pool.get(), nullptr);
  rap::resource gone = std::move(q);
  EXPECT_NO_THROW(gone.destroy());
}

TEST(CppAllocator, ObserversSeeSegmentsAndTraceRecordsCalls) {
  rap::manager m;
  rap::allocator vmm(m, "vmm", "HostVmm(reserve=64MiB, granularity=64KiB)");
  std::vector<int> kinds;
  rap_segment_fn record = [](const rap_segment_event *ev, void *user) {
    static_cast<std::vector<int> *>(user)->push_back(ev->kind);
  };
  vmm.observe(record, &kinds);
  expect_error([&] { vmm.observe(record, &kinds); }, RAP_ERR_EXISTS);
  EXPECT_FALSE(vmm.registrable());
  char path[] = "/tmp/rap-hpp-trace-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  rap::trace_start(path);
  void *p = vmm.allocate(100 << 10);   // maps memory: the observer hears of it
  vmm.deallocate(p);
  rap::trace_flush();
  rap::trace_stop();
  vmm.unobserve(record, &kinds);
  EXPECT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.front(), RAP_SEGMENT_MAP);
  FILE *f = std::fopen(path, "r");
  ASSERT_NE(f, nullptr);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f) != nullptr) text += buf;
  std::fclose(f);
  std::remove(path);
  EXPECT_NE(text.find("\"vmm\""), std::string::npos) << text;
  expect_error([&] { vmm.unobserve(record, &kinds); }, RAP_ERR_NOT_FOUND);
  m.close();
}

#if RAP_HPP_PMR
namespace {
std::string logged;   // what rap's logger was given at the error level
void keep_errors(int level, const char *message, void *) {
  if (level == RAP_LOG_ERROR) logged += message;
}
}  // namespace

/* A free std::pmr cannot be told of (deallocate is called from destructors) is refused, changes
 * nothing, and is not lost: rap's logger has it at the error level, with rap's sentence. */
TEST(CppPmr, ARefusedFreeIsLogged) {
  rap::manager m;
  rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
  rap::pmr_resource res(pool);
  void *p = res.allocate(64, 8);
  size_t before = pool.stats().allocation_count;
  logged.clear();
  ASSERT_EQ(rap_log_set_handler(keep_errors, nullptr), RAP_OK);
  int elsewhere = 0;
  res.deallocate(&elsewhere, 64, 8);
  ASSERT_EQ(rap_log_set_handler(nullptr, nullptr), RAP_OK);
  EXPECT_NE(logged.find("rap::pmr_resource: deallocate("), std::string::npos) << logged;
  EXPECT_NE(logged.find("was not handed out by this allocator"), std::string::npos) << logged;
  EXPECT_EQ(pool.stats().allocation_count, before);
  res.deallocate(p, 64, 8);
  EXPECT_EQ(pool.stats().allocation_count, before - 1);
}
#endif

#if RAP_HPP_PMR
TEST(CppPmr, StdContainersTakeTheirMemoryFromAPool) {
  rap::manager m;
  rap::allocator pool(m, "pool", "QuickPool(HOST, initial_size=1MiB)");
  {
    rap::pmr_resource res(pool);
    std::pmr::vector<std::pmr::string> v(&res);
    for (int i = 0; i < 100; i++) v.emplace_back(std::string(100, static_cast<char>('a' + i % 26)));
    EXPECT_EQ(m.find(v.data()), pool);
    EXPECT_EQ(m.find(v[99].data()), pool);   // the strings' bytes too: the allocator propagates
    EXPECT_GT(pool.stats().allocation_count, 100u);
    EXPECT_TRUE(res.is_equal(rap::pmr_resource(pool)));
    EXPECT_FALSE(res.is_equal(*std::pmr::new_delete_resource()));
    void *first = res.allocate(64, 8);   // the chunk's start; the next block is 256 bytes on
    size_t before = pool.stats().allocation_count;
    try {
      void *p = res.allocate(64, size_t{1} << 20);
      res.deallocate(p, 64, size_t{1} << 20);
      ADD_FAILURE() << "a block at " << p << " was given for an alignment of 1 MiB";
    } catch (const rap::error &e) {
      EXPECT_EQ(e.status(), RAP_ERR_INVALID);
      EXPECT_NE(std::strstr(e.sentence(), "alignment"), nullptr) << e.sentence();
    }
    EXPECT_EQ(pool.stats().allocation_count, before);   // the refused block went back
    res.deallocate(first, 64, 8);
  }
  EXPECT_EQ(pool.stats().current_bytes, 0u);   // every block went back
  pool.destroy();
  m.close();
}
#endif
