/* rap_pyframes.cpp — the Python frames of an allocation, for the trace (RAP_TRACE_PYTHON_STACK).
 *
 * When a trace is open and frames are asked for (rap_torch_python_stack, or RAP_TRACE_PYTHON_STACK=N
 * read at the first allocation), rap_torch_malloc gathers the innermost N Python frames of the
 * thread that allocates, "FILE:LINE FUNCTION" one a line, and hands them to the trace
 * (rap_trace_set_pystack) for the alloc line that follows. The frames are gathered before any lock
 * of rap's is taken: walking them may run Python code (a garbage collection that frees tensors).
 *
 * The library does not link libpython: the few C API functions it needs are looked up in the
 * process (dlsym), once. PyTorch lets the GIL go around its operators, so the allocating thread
 * usually has a Python thread state but does not hold the GIL: it takes the GIL for the walk
 * (PyGILState_Ensure, as PyTorch's own memory history does) and gives it back. A thread with no
 * Python thread state (PyTorch's autograd threads run backward in C++), or an interpreter shutting
 * down, has no Python frames: its lines carry none.
 * Python 3.9 and later (PyFrame_GetBack, PyFrame_GetCode); co_qualname where it exists (3.11).
 */
#include "rap_pyframes.h"

#include <rap/strategy.h>

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using Obj = void *;   /* PyObject *, PyFrameObject *, PyCodeObject *, PyThreadState * */

struct PyApi {
  bool ok = false;
  int (*gil_held)(void) = nullptr;   /* PyGILState_Check: this thread holds the GIL */
  Obj (*err_occurred)(void) = nullptr;
  Obj (*tstate_frame)(Obj) = nullptr;   /* new references, all three */
  Obj (*frame_back)(Obj) = nullptr;
  Obj (*frame_code)(Obj) = nullptr;
  int (*frame_line)(Obj) = nullptr;
  Obj (*getattr)(Obj, const char *) = nullptr;
  const char *(*utf8)(Obj) = nullptr;
  void (*decref)(Obj) = nullptr;
  void (*err_clear)(void) = nullptr;
  Obj (*gil_this)(void) = nullptr;   /* PyGILState_GetThisThreadState: this thread's, or NULL */
  int (*gil_ensure)(void) = nullptr;   /* PyGILState_Ensure / _Release (an enum, int-sized) */
  void (*gil_release)(int) = nullptr;
  int (*finalizing)(void) = nullptr;   /* Py_IsFinalizing (3.13), _Py_IsFinalizing */
};

template <typename F>
void find(F &f, const char *name) {
  f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
}

const PyApi &api() {
  static const PyApi a = [] {
    PyApi p;
    find(p.gil_held, "PyGILState_Check");
    find(p.err_occurred, "PyErr_Occurred");
    find(p.tstate_frame, "PyThreadState_GetFrame");
    find(p.frame_back, "PyFrame_GetBack");
    find(p.frame_code, "PyFrame_GetCode");
    find(p.frame_line, "PyFrame_GetLineNumber");
    find(p.getattr, "PyObject_GetAttrString");
    find(p.utf8, "PyUnicode_AsUTF8");
    find(p.decref, "Py_DecRef");
    find(p.err_clear, "PyErr_Clear");
    find(p.gil_this, "PyGILState_GetThisThreadState");
    find(p.gil_ensure, "PyGILState_Ensure");
    find(p.gil_release, "PyGILState_Release");
    find(p.finalizing, "Py_IsFinalizing");
    if (p.finalizing == nullptr) find(p.finalizing, "_Py_IsFinalizing");
    p.ok = p.gil_held && p.err_occurred && p.tstate_frame && p.frame_back && p.frame_code && p.frame_line &&
           p.getattr && p.utf8 && p.decref && p.err_clear && p.gil_this && p.gil_ensure &&
           p.gil_release && p.finalizing;
    if (!p.ok)
      rap_log(RAP_LOG_WARN, "rap_torch: Python's frames were asked for, but this process has no Python "
                            "3.9 or later to ask (its C API was not found); the trace carries none");
    return p;
  }();
  return a;
}

/* The code object's attribute as UTF-8 (borrowed from *keep, which the caller releases). */
const char *attr(const PyApi &py, Obj code, const char *name, Obj *keep) {
  *keep = py.getattr(code, name);
  if (*keep == nullptr) {
    py.err_clear();
    return nullptr;
  }
  const char *s = py.utf8(*keep);
  if (s == nullptr) py.err_clear();
  return s;
}

/* "FILE:LINE FUNCTION" of one frame at buf + len; the new length (len where it does not fit). */
size_t put_frame(const PyApi &py, Obj frame, char *buf, size_t len, size_t cap) {
  Obj code = py.frame_code(frame);
  if (code == nullptr) return len;
  Obj file = nullptr, name = nullptr;
  const char *f = attr(py, code, "co_filename", &file);
  const char *n = attr(py, code, "co_qualname", &name);
  if (n == nullptr) n = attr(py, code, "co_name", &name);
  int w = std::snprintf(buf + len, cap - len, "%s%s:%d %s", len ? "\n" : "", f ? f : "?",
                        py.frame_line(frame), n ? n : "?");
  if (file) py.decref(file);
  if (name) py.decref(name);
  py.decref(code);
  return w > 0 && static_cast<size_t>(w) < cap - len ? len + static_cast<size_t>(w) : len;
}

std::atomic<int> depth_asked{-1};   /* -1: RAP_TRACE_PYTHON_STACK not read yet */
std::atomic<bool> first_done{false};

int read_env() {
  const char *v = std::getenv("RAP_TRACE_PYTHON_STACK");
  int d = 0;
  if (v != nullptr && *v != '\0') {
    char *end;
    errno = 0;
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || n < 0 || n > RAP_TORCH_PYTHON_STACK_MAX)
      rap_log(RAP_LOG_WARN, "rap_torch: RAP_TRACE_PYTHON_STACK is a number of frames from 0 to %d, not "
                            "'%s'; no Python frames are traced", RAP_TORCH_PYTHON_STACK_MAX, v);
    else
      d = static_cast<int>(n);
  }
  int unread = -1;
  depth_asked.compare_exchange_strong(unread, d);   /* a depth set from Python first wins */
  return depth_asked.load();
}

}  // namespace

int pyframes_set_depth(int depth) {
  if (depth < 0 || depth > RAP_TORCH_PYTHON_STACK_MAX)
    return rap_error_set(RAP_ERR_INVALID, "rap_torch: the Python stack is a number of frames from 0 to %d, "
                         "not %d", RAP_TORCH_PYTHON_STACK_MAX, depth);
  depth_asked.store(depth);
  return RAP_OK;
}

int pyframes_depth(void) {
  int d = depth_asked.load(std::memory_order_relaxed);
  return d >= 0 ? d : read_env();
}

/* The first allocation makes rap's manager, which opens a trace asked for by RAP_TRACE: it is
 * gathered for whatever rap_trace_active says then. */
bool pyframes_gather(char *buf, size_t cap) {
  int depth = pyframes_depth();
  if (depth == 0) return false;
  if (!rap_trace_active() && first_done.exchange(true)) return false;
  first_done.store(true);
  const PyApi &py = api();
  if (!py.ok) return false;
  /* The GIL held already (code that keeps it through the call), or taken here for the walk. The
   * thread state is this thread's, not the GIL holder's (before 3.12 the "current" one is the
   * holder's, whatever thread asks). */
  Obj ts = py.gil_this();
  if (ts == nullptr) return false;
  bool taken = !py.gil_held();
  int gil = 0;
  if (taken) {
    if (py.finalizing()) return false;
    gil = py.gil_ensure();
  }
  size_t len = 0;
  buf[0] = '\0';
  Obj frame = py.err_occurred() == nullptr ? py.tstate_frame(ts) : nullptr;
  for (int i = 0; frame != nullptr && i < depth; i++) {
    len = put_frame(py, frame, buf, len, cap);
    Obj back = py.frame_back(frame);
    py.decref(frame);
    frame = back;
  }
  if (frame != nullptr) py.decref(frame);
  if (taken) py.gil_release(gil);
  return len > 0;
}
