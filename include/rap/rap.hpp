/* rap.hpp — rap for C++17: RAII handles and exceptions over the C API, header-only.
 *
 * rap::manager, rap::allocator and rap::resource own what they wrap and free it when they go;
 * rap::allocator_ref and rap::resource_ref are views of handles someone else owns. A failing call
 * throws rap::error (rap::out_of_memory for RAP_ERR_NOMEM), which carries the status and the
 * sentence rap_last_error() had; nothing in here prints, aborts or hides a status.
 *
 * Where CUDA's headers and CCCL's <cuda/memory_resource> are found (and RAP_HPP_NO_CUDA is not
 * defined) it also has CUDA stream resources, rap::memory_resource (CCCL's cuda::mr resource
 * concept: pass it where CCCL, Thrust or RMM take a resource) and, where Thrust is found too,
 * rap::thrust_allocator. A host-only program includes the same header and gets the rest.
 * Handles must go before the manager that made them: declare the manager first. docs/DESIGN.md
 * ("C++") says why it is built this way; docs/integrations.md ("C++ and CCCL") shows it in use.
 */
#ifndef RAP_RAP_HPP
#define RAP_RAP_HPP

#include <rap/rap.h>
#include <rap/strategy.h>   // rap_log: a free refused where nothing can throw

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#if defined(__has_include)
#if __has_include(<memory_resource>)
#include <memory_resource>
#define RAP_HPP_PMR 1
#endif
#endif
#ifndef RAP_HPP_PMR
#define RAP_HPP_PMR 0
#endif

#if !defined(RAP_HPP_NO_CUDA) && defined(__has_include)
#if __has_include(<cuda_runtime_api.h>) && __has_include(<cuda/memory_resource>) &&               \
    __has_include(<cuda/stream_ref>)
#define RAP_HPP_CUDA 1
#endif
#endif
#ifndef RAP_HPP_CUDA
#define RAP_HPP_CUDA 0
#endif

#if RAP_HPP_CUDA
/* CCCL before 3.1 keeps cuda::mr behind this macro; later ones ignore it. */
#ifndef LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif
#include <rap/cuda.h>

#include <cuda/memory_resource>
#include <atomic>
#include <cuda/stream_ref>
#include <mutex>
#include <unordered_map>
/* CCCL 3.1 renamed the concept's calls: the synchronous ones became allocate_sync and
 * deallocate_sync, the stream-ordered ones allocate(stream, bytes, alignment) and
 * deallocate(stream, ptr, bytes, alignment), where 3.0 had allocate(bytes, alignment) and
 * allocate_async(bytes, alignment, stream). rap::memory_resource has both spellings before 3.1. */
#if defined(CCCL_VERSION) && CCCL_VERSION >= 3001000
#define RAP_HPP_CCCL_NEW_NAMES 1
#else
#define RAP_HPP_CCCL_NEW_NAMES 0
#endif
#if !defined(RAP_HPP_NO_THRUST) && __has_include(<thrust/device_ptr.h>) && defined(__CUDACC__)
#define RAP_HPP_THRUST 1
#include <thrust/device_malloc_allocator.h>
#include <thrust/device_ptr.h>
#endif
#endif /* RAP_HPP_CUDA */
#ifndef RAP_HPP_THRUST
#define RAP_HPP_THRUST 0
#endif

namespace rap {

/* ---------------------------------------------------------------------------------------------
 * Errors: what() is "RAP_ERR_NAME: sentence"; status() the code, sentence() the sentence alone.
 * ------------------------------------------------------------------------------------------- */
class error : public std::runtime_error {
 public:
  error(int status, const std::string &sentence)
      : std::runtime_error(std::string(rap_status_name(status)) + ": " + sentence), status_(status) {}
  int status() const noexcept { return status_; }
  const char *name() const noexcept { return rap_status_name(status_); }
  const char *sentence() const noexcept { return what() + std::strlen(name()) + 2; }

 private:
  int status_;
};

/* RAP_ERR_NOMEM: the allocator and its chain could not find the bytes (after their own recovery). */
class out_of_memory : public error {
 public:
  using error::error;
};

namespace detail {
/* Throws the error for status, with the calling thread's rap_last_error() (or the code's static
 * text where there is no sentence). */
[[noreturn]] inline void throw_status(int status) {
  const char *s = rap_last_error();
  std::string sentence = s != nullptr && *s != '\0' ? s : rap_strerror(status);
  if (status == RAP_ERR_NOMEM) throw out_of_memory(status, sentence);
  throw error(status, sentence);
}
inline void check(int status) {
  if (status != RAP_OK) throw_status(status);
}
/* A free that cannot throw (a destructor's, a noexcept deallocate) and was refused: the block stays
 * as it was, and the sentence goes to rap's logger at the error level, as well as to
 * rap_last_error(), so that it is not lost. */
inline void refused_free(int status, const char *who, void *p) noexcept {
  if (status != RAP_OK) rap_log(RAP_LOG_ERROR, "%s: deallocate(%p) refused: %s", who, p, rap_last_error());
}
/* Whether a manager still lives: shared by the manager and the handles it made, so that a handle
 * that outlives its manager (closed, destroyed) destroys nothing. */
struct manager_life {
  rap_manager *rm;
};
using life_ptr = std::shared_ptr<manager_life>;
inline bool alive(const life_ptr &l) noexcept { return !l || l->rm != nullptr; }
}  // namespace detail

using stats = rap_stats;

struct memory_info {
  std::size_t free_bytes, total_bytes;
};

inline const char *version() noexcept { return rap_version(); }
/* The event trace (docs/trace.md): one file for the process. */
inline void trace_start(const char *path) { detail::check(rap_trace_start(path)); }
inline void trace_stop() { detail::check(rap_trace_stop()); }
inline void trace_flush() { detail::check(rap_trace_flush()); }
/* Throws the reason when rap_allocator_make_spec could not make spec. */
inline void check_spec(const char *spec) { detail::check(rap_spec_check(spec)); }

class manager;

/* ---------------------------------------------------------------------------------------------
 * Resources: streams of execution. A default resource_ref is the host resource on allocate and
 * the block's owner on deallocate, as NULL is in the C API.
 * ------------------------------------------------------------------------------------------- */
class resource_ref {
 public:
  resource_ref() noexcept = default;
  resource_ref(rap_resource *r) noexcept : r_(r) {}   // NOLINT: a view converts implicitly
  rap_resource *get() const noexcept { return r_; }
  const char *kind() const noexcept { return rap_resource_kind(r_); }
  void synchronize() const { detail::check(rap_resource_synchronize(r_)); }
  /* Enqueues fn(arg) (host_async). */
  void submit(void (*fn)(void *), void *arg) const { detail::check(rap_resource_submit(r_, fn, arg)); }
  /* Enqueues a callable, moved to the heap until it has run. It must not throw: an exception
   * leaving it ends the program, as one leaving a thread's function does. */
  template <class F>
  void submit(F &&f) const {
    using Fn = std::decay_t<F>;
    std::unique_ptr<Fn> p(new Fn(std::forward<F>(f)));
    void (*run)(void *) = [](void *arg) noexcept {
      std::unique_ptr<Fn> q(static_cast<Fn *>(arg));
      (*q)();
    };
    detail::check(rap_resource_submit(r_, run, p.get()));
    p.release();   // the queue owns it now
  }
#if RAP_HPP_CUDA
  cudaStream_t stream() const noexcept { return rap_resource_cuda_stream(r_); }   // 0: not cuda
  /* A graph capture that pools know of (rap/cuda.h says what it changes). */
  void begin_capture(cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) const {
    detail::check(rap_resource_cuda_begin_capture(r_, mode));
  }
  cudaGraph_t end_capture() const {
    cudaGraph_t g = nullptr;
    detail::check(rap_resource_cuda_end_capture(r_, &g));
    return g;
  }
#endif
  friend bool operator==(resource_ref a, resource_ref b) noexcept { return a.r_ == b.r_; }
  friend bool operator!=(resource_ref a, resource_ref b) noexcept { return a.r_ != b.r_; }

 protected:
  rap_resource *r_ = nullptr;
};

/* Owns a resource made by the manager (host_async, cuda): destroyed (after synchronizing) when it
 * goes. Convert to resource_ref to pass it on. */
class resource : public resource_ref {
 public:
  resource() noexcept = default;
  /* Takes over r from the C API; it must then go before its manager does. */
  explicit resource(rap_resource *adopt) noexcept : resource_ref(adopt) {}
  resource(const resource &) = delete;
  resource &operator=(const resource &) = delete;
  resource(resource &&o) noexcept : resource_ref(o.r_), life_(std::move(o.life_)) { o.r_ = nullptr; }
  resource &operator=(resource &&o) noexcept {
    if (this != &o) {
      reset();
      r_ = std::exchange(o.r_, nullptr);
      life_ = std::move(o.life_);
    }
    return *this;
  }
  ~resource() { reset(); }

  static resource host_async(manager &m);   // a CPU work queue with a worker thread
#if RAP_HPP_CUDA
  static resource cuda(manager &m, cudaStream_t s);   // wraps s, which the caller keeps owning
  static resource cuda_stream(manager &m);            // creates a stream and owns it
#endif
  /* Destroys now and says why it could not (RAP_ERR_BUSY from the resource's own work). */
  void destroy() {
    if (r_ != nullptr && detail::alive(life_)) {
      int st = rap_resource_destroy(r_);
      if (st != RAP_OK) detail::throw_status(st);
    }
    r_ = nullptr;
    life_.reset();
  }
  /* Gives r up to the caller, who destroys it (before the manager goes). Not release(), which an
   * allocator has for rap_release. */
  rap_resource *detach() noexcept {
    life_.reset();
    return std::exchange(r_, nullptr);
  }

 private:
  friend class manager;
  resource(rap_resource *r, detail::life_ptr life) noexcept : resource_ref(r), life_(std::move(life)) {}
  void reset() noexcept {   // a destructor cannot throw: destroy() says why it failed
    if (r_ != nullptr && detail::alive(life_)) (void)rap_resource_destroy(r_);
    r_ = nullptr;
    life_.reset();
  }
  detail::life_ptr life_;   // null: adopted, not known to be made by a rap::manager
};

/* ---------------------------------------------------------------------------------------------
 * Allocators. allocator_ref views an allocator the manager owns; allocator owns one and destroys
 * it when it goes (an allocator still holding blocks is left to the manager, which reports it).
 * ------------------------------------------------------------------------------------------- */
class allocator_ref {
 public:
  allocator_ref() noexcept = default;
  allocator_ref(rap_allocator *a) noexcept : a_(a) {}   // NOLINT: a view converts implicitly
  rap_allocator *get() const noexcept { return a_; }
  explicit operator bool() const noexcept { return a_ != nullptr; }
  const char *name() const noexcept { return rap_allocator_name(a_); }
  const char *strategy() const noexcept { return rap_allocator_strategy(a_); }
  allocator_ref parent() const noexcept { return rap_allocator_parent(a_); }

  void *allocate(std::size_t bytes, resource_ref r = {}) const {
    void *p = nullptr;
    int st = rap_allocate(a_, &p, bytes, r.get());
    if (st != RAP_OK) detail::throw_status(st);
    return p;
  }
  void deallocate(void *p, resource_ref r = {}) const { detail::check(rap_deallocate(a_, p, r.get())); }
  /* p is also used on r: it stays pending at its deallocation until r has passed that point. */
  void record(void *p, resource_ref r) const { detail::check(rap_record_resource(a_, p, r.get())); }
  resource_ref owner(const void *p) const {
    rap_resource *r = nullptr;
    detail::check(rap_pointer_resource(a_, p, &r));
    return r;
  }
  void release() const { detail::check(rap_release(a_)); }
  void check() const { detail::check(rap_allocator_check(a_)); }
  rap::stats stats() const {
    rap::stats s{};
    detail::check(rap_allocator_stats(a_, &s));
    return s;
  }
  rap::stats stats(resource_ref r) const {
    rap::stats s{};
    detail::check(rap_allocator_resource_stats(a_, r.get(), &s));
    return s;
  }
  void reset_peaks() const { detail::check(rap_allocator_reset_peaks(a_)); }
  rap::memory_info memory_info() const {
    rap::memory_info m{0, 0};
    detail::check(rap_allocator_memory_info(a_, &m.free_bytes, &m.total_bytes));
    return m;
  }
  void *device_pointer(const void *p) const {
    void *d = nullptr;
    detail::check(rap_device_pointer(a_, p, &d));
    return d;
  }
  void set_peer_access(int device, bool enable) const {
    detail::check(rap_allocator_set_peer_access(a_, device, enable ? 1 : 0));
  }
  void set_oom_handler(rap_oom_handler fn, void *user) const {
    detail::check(rap_allocator_set_oom_handler(a_, fn, user));
  }
  void sleep(rap_sleep_mode mode = RAP_SLEEP_BACKUP) const {
    detail::check(rap_allocator_sleep(a_, mode));
  }
  void wake() const { detail::check(rap_allocator_wake(a_)); }
  bool asleep() const noexcept { return rap_allocator_is_asleep(a_) != 0; }
  /* Segment observers: fn(ev, user) for each chunk or mapping that comes or goes. */
  void observe(rap_segment_fn fn, void *user) const { detail::check(rap_allocator_observe(a_, fn, user)); }
  void unobserve(rap_segment_fn fn, void *user) const {
    detail::check(rap_allocator_unobserve(a_, fn, user));
  }
  bool registrable() const {   // RAP_OK -> true, RAP_ERR_UNSUPPORTED -> false
    int st = rap_allocator_registrable(a_);
    if (st == RAP_ERR_UNSUPPORTED) return false;
    detail::check(st);
    return true;
  }

  friend bool operator==(allocator_ref a, allocator_ref b) noexcept { return a.a_ == b.a_; }
  friend bool operator!=(allocator_ref a, allocator_ref b) noexcept { return a.a_ != b.a_; }

 protected:
  rap_allocator *a_ = nullptr;
};

class allocator : public allocator_ref {
 public:
  allocator() noexcept = default;
  /* Takes over a from the C API; it must then go before its manager does. */
  explicit allocator(rap_allocator *adopt) noexcept : allocator_ref(adopt) {}
  /* The whole chain from one spec: "ThreadSafe(QuickPool(HOST, initial_size=1MiB))". */
  allocator(manager &m, const char *name, const char *spec);
  /* One strategy over a named parent, as rap_allocator_make. */
  allocator(manager &m, const char *name, const char *strategy, const char *parent,
            const char *options);
  allocator(const allocator &) = delete;
  allocator &operator=(const allocator &) = delete;
  allocator(allocator &&o) noexcept : allocator_ref(o.a_), life_(std::move(o.life_)) { o.a_ = nullptr; }
  allocator &operator=(allocator &&o) noexcept {
    if (this != &o) {
      reset();
      a_ = std::exchange(o.a_, nullptr);
      life_ = std::move(o.life_);
    }
    return *this;
  }
  ~allocator() { reset(); }
  /* Destroys now and says why it could not (RAP_ERR_BUSY: live blocks or children); then it still
   * owns the allocator. */
  void destroy() {
    if (a_ != nullptr && detail::alive(life_)) {
      int st = rap_allocator_destroy(a_);
      if (st != RAP_OK) detail::throw_status(st);
    }
    a_ = nullptr;
    life_.reset();
  }
  /* Gives a up to the caller (or to the manager, which destroys it at its end). release() is
   * rap_release, as in the C API and Umpire. */
  rap_allocator *detach() noexcept {
    life_.reset();
    return std::exchange(a_, nullptr);
  }

 private:
  void reset() noexcept {   // BUSY (live blocks): the manager destroys it and reports them
    if (a_ != nullptr && detail::alive(life_)) (void)rap_allocator_destroy(a_);
    a_ = nullptr;
    life_.reset();
  }
  detail::life_ptr life_;   // null: adopted
};

/* ---------------------------------------------------------------------------------------------
 * Manager: the registry. Its destructor destroys everything left (rap_manager_destroy); close()
 * does the same and throws RAP_ERR_BUSY with the leak report when blocks were still live.
 * ------------------------------------------------------------------------------------------- */
class manager {
 public:
  manager() {
    rap_manager *rm = nullptr;
    detail::check(rap_manager_create(&rm));
    try {
      life_ = std::make_shared<detail::manager_life>(detail::manager_life{rm});
    } catch (...) {
      (void)rap_manager_destroy(rm);
      throw;
    }
  }
  manager(const manager &) = delete;
  manager &operator=(const manager &) = delete;
  manager(manager &&o) noexcept = default;   // the moved-from manager holds nothing
  manager &operator=(manager &&o) noexcept {
    if (this != &o) {
      end();
      life_ = std::move(o.life_);
    }
    return *this;
  }
  ~manager() { end(); }
  void close() {
    int st = end();
    if (st != RAP_OK) detail::throw_status(st);
  }
  rap_manager *get() const noexcept { return life_ ? life_->rm : nullptr; }
  /* Resources made here; the CUDA ones are in the CUDA part below. */
  rap::resource host_async() const {
    rap_resource *r = nullptr;
    detail::check(rap_resource_create_host_async(get(), &r));
    return rap::resource(r, life_);
  }
#if RAP_HPP_CUDA
  rap::resource wrap_stream(cudaStream_t s) const {   // the caller keeps owning s
    rap_resource *r = nullptr;
    detail::check(rap_resource_create_cuda(get(), s, &r));
    return rap::resource(r, life_);
  }
  rap::resource cuda_stream() const {   // a new stream, owned by the resource
    rap_resource *r = nullptr;
    detail::check(rap_resource_create_cuda_stream(get(), &r));
    return rap::resource(r, life_);
  }
#endif

  resource_ref host() const {
    rap_resource *r = nullptr;
    detail::check(rap_resource_host(get(), &r));
    return r;
  }
  allocator_ref allocator(const char *name) const {   // "HOST", "DEVICE", or a made name
    rap_allocator *a = nullptr;
    detail::check(rap_allocator_get(get(), name, &a));
    return a;
  }
  allocator_ref make(const char *name, const char *strategy, const char *parent,
                     const char *options = "") const {
    rap_allocator *a = nullptr;
    detail::check(rap_allocator_make(get(), name, strategy, parent, options, &a));
    return a;
  }
  allocator_ref make_spec(const char *name, const char *spec) const {
    rap_allocator *a = nullptr;
    detail::check(rap_allocator_make_spec(get(), name, spec, &a));
    return a;
  }
  allocator_ref find(const void *p) const {   // the allocator that handed p out
    rap_allocator *a = nullptr;
    detail::check(rap_allocator_find(get(), p, &a));
    return a;
  }
  bool registrable(const void *p) const {   // RAP_OK -> true, RAP_ERR_UNSUPPORTED -> false
    int st = rap_pointer_registrable(get(), p);
    if (st == RAP_ERR_UNSUPPORTED) return false;
    detail::check(st);
    return true;
  }
  const detail::life_ptr &life() const noexcept { return life_; }

 private:
  int end() noexcept {   // destroys the registry; the handles it made see it gone
    if (!life_) return RAP_OK;
    rap_manager *rm = std::exchange(life_->rm, nullptr);
    life_.reset();
    return rm != nullptr ? rap_manager_destroy(rm) : RAP_OK;
  }
  detail::life_ptr life_;
};

inline resource resource::host_async(manager &m) { return m.host_async(); }

inline allocator::allocator(manager &m, const char *name, const char *spec) : life_(m.life()) {
  detail::check(rap_allocator_make_spec(m.get(), name, spec, &a_));
}
inline allocator::allocator(manager &m, const char *name, const char *strategy, const char *parent,
                            const char *options)
    : life_(m.life()) {
  detail::check(rap_allocator_make(m.get(), name, strategy, parent, options, &a_));
}

#if RAP_HPP_PMR
/* ---------------------------------------------------------------------------------------------
 * rap::pmr_resource: an allocator of host memory (HOST, PINNED, UM, pools over them) as a
 * std::pmr::memory_resource, for std::pmr containers. Blocks belong to r (default: the host).
 * Alignments above the allocator's are refused (rap::error, RAP_ERR_INVALID); deallocate does not
 * throw, since containers call it from destructors: a refused one leaves rap_last_error() and
 * logs it (rap's logger, error level).
 * ------------------------------------------------------------------------------------------- */
class pmr_resource : public std::pmr::memory_resource {
 public:
  explicit pmr_resource(allocator_ref a, resource_ref r = {}) noexcept : a_(a), r_(r) {}
  allocator_ref allocator() const noexcept { return a_; }
  resource_ref resource() const noexcept { return r_; }

 private:
  void *do_allocate(std::size_t bytes, std::size_t alignment) override {
    void *p = a_.allocate(bytes, r_);
    if ((reinterpret_cast<std::uintptr_t>(p) & (alignment - 1)) != 0) {
      (void)rap_deallocate(a_.get(), p, r_.get());
      throw error(RAP_ERR_INVALID, std::string("rap::pmr_resource: allocator '") + a_.name() +
                                       "' gives no alignment of " + std::to_string(alignment) +
                                       " bytes (its alignment= option sets it)");
    }
    return p;
  }
  void do_deallocate(void *p, std::size_t, std::size_t) override {
    detail::refused_free(rap_deallocate(a_.get(), p, r_.get()), "rap::pmr_resource", p);
  }
  bool do_is_equal(const std::pmr::memory_resource &o) const noexcept override {
    auto *other = dynamic_cast<const pmr_resource *>(&o);
    return other != nullptr && other->a_ == a_;
  }

  allocator_ref a_;
  resource_ref r_;
};
#endif /* RAP_HPP_PMR */

#if RAP_HPP_CUDA
inline resource resource::cuda(manager &m, cudaStream_t s) { return m.wrap_stream(s); }
inline resource resource::cuda_stream(manager &m) { return m.cuda_stream(); }

namespace detail {
/* One rap cuda resource per stream handle, made at a stream's first use and destroyed with the
 * last copy of the memory_resource that shares it. A stream may be destroyed as soon as a call
 * with it has returned (RMM's rule): each resource of a real stream is call-scoped
 * (rap_resource_set_call_scoped: every free on it is fenced before it returns, and its destroy
 * waits for its last event, never for the stream); the default streams, which never go, are not. The map is read under its mutex only on a
 * thread's first call for a stream: each thread remembers its last (map, stream, resource), the
 * map named by a number no other map gets, so a hit takes no lock (no lock shared by every
 * thread on the hot path, as in the pools themselves). An entry lives as long as its map. */
class stream_resources {
 public:
  explicit stream_resources(life_ptr life) noexcept : life_(std::move(life)), id_(next_id()) {}
  stream_resources(const stream_resources &) = delete;
  stream_resources &operator=(const stream_resources &) = delete;
  ~stream_resources() {
    if (!alive(life_)) return;   // the manager went first and took them
    for (auto &e : map_) (void)rap_resource_destroy(e.second);
  }
  bool manager_alive() const noexcept { return life_->rm != nullptr; }
  rap_resource *get(cudaStream_t s) {
    if (life_->rm == nullptr) throw error(RAP_ERR_INVALID, "rap::memory_resource: its manager is gone");
    hit &h = last_hit();
    if (h.id == id_ && h.stream == s) return h.r;
    rap_resource *r = find_or_make(s);
    h = hit{id_, s, r};
    return r;
  }

 private:
  struct hit {
    std::uint64_t id;
    cudaStream_t stream;
    rap_resource *r;
  };
  static hit &last_hit() noexcept {
    thread_local hit h{0, nullptr, nullptr};
    return h;
  }
  static std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return ++n;
  }
  rap_resource *find_or_make(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(s);
    if (it != map_.end()) return it->second;
    rap_resource *r = nullptr;
    check(rap_resource_create_cuda(life_->rm, s, &r));
    try {
      if (s != cudaStream_t{} && s != cudaStreamLegacy && s != cudaStreamPerThread)
        check(rap_resource_set_call_scoped(r, 1));
      map_.emplace(s, r);
    } catch (...) {
      (void)rap_resource_destroy(r);
      throw;
    }
    return r;
  }

  life_ptr life_;   // never null: made from a manager
  std::uint64_t id_;
  std::mutex mu_;
  std::unordered_map<cudaStream_t, rap_resource *> map_;
};
}  // namespace detail

/* ---------------------------------------------------------------------------------------------
 * rap::memory_resource: an allocator of device memory as a CCCL resource (cuda::mr::resource
 * with cuda::mr::device_accessible; CCCL 3.0's resource and async_resource).
 * rap::pinned_memory_resource claims host_accessible too, for PINNED and UM; basic_memory_resource
 * takes any properties. A block allocated on a stream belongs to that stream's rap resource (one
 * per stream, made at its first use); deallocate on the same stream makes it pending there, on
 * another stream pending on both. A stream needs to live only until a call with it returns. The synchronous calls use the legacy default stream,
 * allocate_sync then waits for it, as RMM's resources do. Copies share the allocator and the
 * stream resources, which go with the last copy (or with the manager, if it goes first). Calls
 * from several threads need a thread-safe allocator (ThreadSafe(...)). deallocate cannot throw
 * (CCCL declares it noexcept): a refused one leaves its sentence in rap_last_error() and logs it
 * (rap's logger, error level).
 * ------------------------------------------------------------------------------------------- */
template <class... Properties>
class basic_memory_resource {
 public:
  static constexpr std::size_t default_alignment = 256;

  basic_memory_resource(manager &m, allocator_ref a)
      : a_(a) {
    if (!a_) throw error(RAP_ERR_INVALID, "rap::memory_resource: the allocator is null");
    if (m.get() == nullptr) throw error(RAP_ERR_INVALID, "rap::memory_resource: the manager is closed");
    streams_ = std::make_shared<detail::stream_resources>(m.life());
  }
  allocator_ref allocator() const noexcept { return a_; }
  /* The rap resource that stands for s (made at its first use). */
  resource_ref resource_of(cuda::stream_ref s) const { return streams_->get(s.get()); }

  void *allocate(cuda::stream_ref s, std::size_t bytes, std::size_t alignment = default_alignment) {
    void *p = a_.allocate(bytes, streams_->get(s.get()));
    if (alignment != 0 && (reinterpret_cast<std::uintptr_t>(p) & (alignment - 1)) != 0) {
      (void)rap_deallocate(a_.get(), p, nullptr);
      throw error(RAP_ERR_INVALID, std::string("rap::memory_resource: allocator '") + a_.name() +
                                       "' gives no alignment of " + std::to_string(alignment) +
                                       " bytes (its alignment= option sets it)");
    }
    return p;
  }
  void deallocate(cuda::stream_ref s, void *p, std::size_t /*bytes*/,
                  std::size_t /*alignment*/ = default_alignment) noexcept {
    if (!streams_->manager_alive()) return;   // the manager took the pool and its blocks with it
    rap_resource *r = nullptr;
    try {
      r = streams_->get(s.get());
    } catch (...) {
      r = nullptr;   // no resource for s could be made: the block's owner takes it back
    }
    int st = rap_deallocate(a_.get(), p, r);
    if (st == RAP_ERR_WRONG_RESOURCE) {
      // Freed on another stream than it was allocated on (RMM's device_buffer::set_stream does
      // this): s used it too, so it stays pending until both streams have passed the free.
      // Where the record fails (out of host memory, s capturing a graph), s is still there within
      // this call: its work is waited for, and the block freed on its owner all the same.
      if (rap_record_resource(a_.get(), p, r) != RAP_OK) (void)cudaStreamSynchronize(s.get());
      st = rap_deallocate(a_.get(), p, nullptr);
    }
    detail::refused_free(st, "rap::memory_resource", p);
  }
  void *allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    void *p = allocate(cuda::stream_ref(cudaStream_t{}), bytes, alignment);
    cudaError_t e = cudaStreamSynchronize(cudaStream_t{});
    if (e != cudaSuccess) {
      deallocate_sync(p, bytes, alignment);
      throw error(RAP_ERR_BACKEND, std::string("rap::memory_resource: cudaStreamSynchronize: ") +
                                       cudaGetErrorString(e));
    }
    return p;
  }
  void deallocate_sync(void *p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    deallocate(cuda::stream_ref(cudaStream_t{}), p, bytes, alignment);
  }
#if !RAP_HPP_CCCL_NEW_NAMES
  /* CCCL 3.0's spelling of the same calls. */
  void *allocate(std::size_t bytes, std::size_t alignment) { return allocate_sync(bytes, alignment); }
  void deallocate(void *p, std::size_t bytes, std::size_t alignment) noexcept {
    deallocate_sync(p, bytes, alignment);
  }
  void *allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref s) {
    return allocate(s, bytes, alignment);
  }
  void deallocate_async(void *p, std::size_t bytes, std::size_t alignment, cuda::stream_ref s) noexcept {
    deallocate(s, p, bytes, alignment);
  }
#endif
  friend bool operator==(const basic_memory_resource &x, const basic_memory_resource &y) noexcept {
    return x.a_ == y.a_;
  }
  friend bool operator!=(const basic_memory_resource &x, const basic_memory_resource &y) noexcept {
    return !(x == y);
  }
  /* The properties it was declared with, and no other. */
  template <class P, std::enable_if_t<(std::is_same_v<P, Properties> || ...), int> = 0>
  friend void get_property(const basic_memory_resource &, P) noexcept {}

 private:
  allocator_ref a_;
  std::shared_ptr<detail::stream_resources> streams_;
};

using memory_resource = basic_memory_resource<cuda::mr::device_accessible>;
using pinned_memory_resource =
    basic_memory_resource<cuda::mr::host_accessible, cuda::mr::device_accessible>;

#if RAP_HPP_THRUST
/* ---------------------------------------------------------------------------------------------
 * rap::thrust_allocator<T>: Thrust's allocator over a rap allocator and one rap resource (a cuda
 * stream): thrust::device_vector<T, rap::thrust_allocator<T>>, and temporary storage through
 * thrust::cuda::par_nosync(alloc).on(alloc.stream()). Blocks belong to the resource; deallocate
 * cannot throw (Thrust calls it from destructors): a refused one leaves rap_last_error() and logs
 * it (rap's logger, error level).
 * ------------------------------------------------------------------------------------------- */
template <class T>
class thrust_allocator : public thrust::device_malloc_allocator<T> {
 public:
  using value_type = T;
  using pointer = thrust::device_ptr<T>;
  using size_type = std::size_t;
  template <class U>
  struct rebind {
    using other = thrust_allocator<U>;
  };

  thrust_allocator(allocator_ref a, resource_ref r) noexcept : a_(a), r_(r) {}
  template <class U>
  thrust_allocator(const thrust_allocator<U> &o) noexcept : a_(o.allocator()), r_(o.resource()) {}

  pointer allocate(size_type n) {
    if (n > static_cast<size_type>(-1) / sizeof(T))
      throw error(RAP_ERR_INVALID, "rap::thrust_allocator: " + std::to_string(n) +
                                       " elements overflow a size_t");
    return pointer(static_cast<T *>(a_.allocate(n * sizeof(T), r_)));
  }
  void deallocate(pointer p, size_type) noexcept {
    void *raw = thrust::raw_pointer_cast(p);
    detail::refused_free(rap_deallocate(a_.get(), raw, r_.get()), "rap::thrust_allocator", raw);
  }
  allocator_ref allocator() const noexcept { return a_; }
  resource_ref resource() const noexcept { return r_; }
  cudaStream_t stream() const noexcept { return r_.stream(); }

  friend bool operator==(const thrust_allocator &x, const thrust_allocator &y) noexcept {
    return x.a_ == y.a_ && x.r_ == y.r_;
  }
  friend bool operator!=(const thrust_allocator &x, const thrust_allocator &y) noexcept {
    return !(x == y);
  }

 private:
  allocator_ref a_;
  resource_ref r_;
};
#endif /* RAP_HPP_THRUST */
#endif /* RAP_HPP_CUDA */

}  // namespace rap

#endif /* RAP_RAP_HPP */
