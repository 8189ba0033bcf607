/* status.c — status names and texts, the thread-local error sentence, and the logger.
 *
 * Status strings come from RAP_STATUS_LIST in rap.h, so the list is written once. The logger is
 * the only place the library writes anything; its level comes from RAP_LOG_LEVEL at first use.
 */
#include "rap_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local char last_error[512];
_Thread_local int rapi_hash_oom;

#define RAPI_VERSION_STRING                                                                        \
  RAPI_STR(RAP_VERSION_MAJOR) "." RAPI_STR(RAP_VERSION_MINOR) "." RAPI_STR(RAP_VERSION_PATCH)
const char *rap_version(void) { return RAPI_VERSION_STRING; }

const char *rap_status_name(int status) {
  switch (status) {
#define RAPI_NAME_CASE(name, value, text) \
  case value:                             \
    return #name;
    RAP_STATUS_LIST(RAPI_NAME_CASE)
#undef RAPI_NAME_CASE
  default:
    return "RAP_ERR_UNKNOWN_STATUS";
  }
}

const char *rap_strerror(int status) {
  switch (status) {
#define RAPI_TEXT_CASE(name, value, text) \
  case value:                             \
    return text;
    RAP_STATUS_LIST(RAPI_TEXT_CASE)
#undef RAPI_TEXT_CASE
  default:
    return "unknown status code";
  }
}

const char *rap_last_error(void) { return last_error; }

/* Formatted apart first: a caller may pass rap_last_error() itself as an argument (a sentence that
 * adds its context to the last one), and vsnprintf may not write where it reads. */
static int vfail(int status, const char *fmt, va_list ap) {
  char sentence[sizeof last_error];
  vsnprintf(sentence, sizeof sentence, fmt, ap);
  memcpy(last_error, sentence, sizeof last_error);
  return status;
}

int rapi_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

int rap_error_set(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

void rapi_format_size(char *buf, size_t cap, size_t bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%zu B", bytes);
  else if (v == (double)(size_t)v)
    snprintf(buf, cap, "%zu %s", (size_t)v, units[u]);
  else
    snprintf(buf, cap, "%.1f %s", v, units[u]);
}

/* ---- logger ---------------------------------------------------------------------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static rap_log_fn log_fn;
static void *log_user;
static int log_level = -1;   /* -1: not read from the environment yet */

/* *bad is set when the variable holds something that is not a level. */
static int level_from_env(bool *bad) {
  const char *v = getenv("RAP_LOG_LEVEL");
  *bad = false;
  if (v == NULL || *v == '\0') return RAP_LOG_WARN;
  static const char *names[] = {"debug", "info", "warn", "error", "off"};
  for (int i = 0; i < 5; i++)
    if (strcasecmp(v, names[i]) == 0) return i;
  if (strcasecmp(v, "warning") == 0) return RAP_LOG_WARN;
  if (v[0] >= '0' && v[0] <= '4' && v[1] == '\0') return v[0] - '0';
  *bad = true;
  return RAP_LOG_WARN;
}

int rap_log_set_handler(rap_log_fn fn, void *user) {
  pthread_mutex_lock(&log_lock);
  log_fn = fn;
  log_user = user;
  pthread_mutex_unlock(&log_lock);
  return RAP_OK;
}

int rap_log_set_level(int level) {
  if (level < RAP_LOG_DEBUG || level > RAP_LOG_OFF)
    return rapi_fail(RAP_ERR_INVALID, "rap_log_set_level: level %d is not a rap_log_level", level);
  __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
  return RAP_OK;
}

/* The level is read without a lock (debug lines sit on paths many threads take); the environment
 * is read once, and a value that is no level is said, not ignored. */
void rapi_log_read_env(void) {
  bool bad;
  int level = level_from_env(&bad);
  __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
  if (bad)
    rap_log(RAP_LOG_WARN, "RAP_LOG_LEVEL='%s' is not a level (debug, info, warn, error, off or 0-4): "
            "using warn", getenv("RAP_LOG_LEVEL"));
}

int rap_log_get_level(void) {
  int l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
  if (RAPI_UNLIKELY(l < 0)) {
    pthread_mutex_lock(&log_lock);
    bool first = __atomic_load_n(&log_level, __ATOMIC_RELAXED) < 0;
    if (first) __atomic_store_n(&log_level, RAP_LOG_WARN, __ATOMIC_RELAXED);   /* no recursion */
    pthread_mutex_unlock(&log_lock);
    if (first) rapi_log_read_env();
    l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
  }
  return l;
}

void rap_log(int level, const char *fmt, ...) {
  if (level < rap_log_get_level()) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  rap_log_fn fn = log_fn;
  void *user = log_user;
  pthread_mutex_unlock(&log_lock);
  if (fn != NULL) {
    fn(level, msg, user);
    return;
  }
  static const char *tags[] = {"debug", "info", "warn", "error"};
  fprintf(stderr, "rap %s: %s\n", tags[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}
