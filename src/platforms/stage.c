/* stage.c — a staged copy through a ring of pinned slots (stage.h): the schedule the calling
 * thread keeps, and the threads that copy host memory in parts.
 *
 * The calling thread queues the platform's copies, waits for their marks and posts each chunk's
 * host copy as a job of parts; the threads (and the caller, while it waits) take parts in order.
 * A job is a slot's: chunk c's is jobs[c % slots], reused only once chunk c's job is done and the
 * platform's copy out of its slot has passed. Everything shared is under one mutex, taken once a
 * part (a part is 2 MiB of copying: the lock is never what limits).
 */
#include "platforms/stage.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* By default one thread a CPU the caller may run on besides the caller, from 8 to 32: the host's
 * side (first touch of the backup's pages, the copies out of the ring) is what limits a first
 * sleep, and it grows with threads to about one a CPU (docs/DESIGN.md, "The copies"). */
#define STAGE_THREADS_LEAST 8u
#define STAGE_THREADS_MOST 32u
#define STAGE_THREADS_MAX 64u

typedef struct job {
  size_t chunk, len;               /* which chunk, and its bytes */
  size_t parts, taken, done;
} job;

typedef struct engine {
  const rapi_stage *sg;
  char *host;
  size_t touched, total, chunks;
  rapi_runs *runs;
  rapi_run run;                    /* the platform's side: the run it is in, and how far into it */
  size_t run_off;
  bool to_host, stop;
  pthread_mutex_t mu;
  pthread_cond_t work, done;       /* a part to take (or stop); a job done */
  job *jobs;                       /* sg->slots of them */
  size_t posted, take;             /* chunks posted; the first with parts not yet taken */
  int st;                          /* the first failure, and its sentence */
  char why[512];
} engine;

unsigned rapi_stage_threads_for(long cpus) {
  unsigned long n = cpus > 1 ? (unsigned long)cpus - 1 : 0;
  return n < STAGE_THREADS_LEAST ? STAGE_THREADS_LEAST
         : n > STAGE_THREADS_MOST ? STAGE_THREADS_MOST : (unsigned)n;
}

/* The CPUs the caller may run on (its threads inherit its affinity: a rank bound to 16 CPUs of a
 * host of 128 starts 15), else those online; -1 where neither is known. */
static long usable_cpus(void) {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
  return sysconf(_SC_NPROCESSORS_ONLN);
}

static unsigned default_threads(void) { return rapi_stage_threads_for(usable_cpus()); }

unsigned rapi_stage_threads(void) {
  const char *v = getenv("RAP_SLEEP_THREADS");
  if (v == NULL || *v == '\0') return default_threads();
  char *end = NULL;
  unsigned long n = strtoul(v, &end, 10);
  if (*end != '\0' || n > STAGE_THREADS_MAX) {
    rap_log(RAP_LOG_WARN, "RAP_SLEEP_THREADS='%s' is not a number of threads from 0 to %u: %u are "
            "used", v, STAGE_THREADS_MAX, default_threads());
    return default_threads();
  }
  return (unsigned)n;
}

static size_t chunk_len(const engine *e, size_t c) {
  size_t at = c * e->sg->slot_size;
  return e->total - at < e->sg->slot_size ? e->total - at : e->sg->slot_size;
}

/* Under the lock: keeps the first failure, with the sentence the failing thread was given. */
static void fail_locked(engine *e, int st) {
  if (st == RAP_OK || e->st != RAP_OK) return;
  e->st = st;
  snprintf(e->why, sizeof e->why, "%s", rap_last_error());
}

/* The caller's own calls: false (and the failure kept) when st is one. */
static bool step(engine *e, int st) {
  pthread_mutex_lock(&e->mu);
  fail_locked(e, st);
  bool ok = e->st == RAP_OK;
  pthread_mutex_unlock(&e->mu);
  return ok;
}

static bool job_done_locked(const engine *e, size_t c) {
  const job *j = &e->jobs[c % e->sg->slots];
  return c < e->posted && j->chunk == c && j->done == j->parts;
}

static bool job_done(engine *e, size_t c) {
  pthread_mutex_lock(&e->mu);
  bool d = job_done_locked(e, c);
  pthread_mutex_unlock(&e->mu);
  return d;
}

/* One part of chunk `chunk` (len bytes in all): the slot's bytes to the backup or back. */
static int run_part(const engine *e, size_t chunk, size_t len, size_t p) {
  const rapi_stage *sg = e->sg;
  size_t at = p * sg->part, n = len - at < sg->part ? len - at : sg->part;
  char *slot = sg->ring + (chunk % sg->slots) * sg->slot_size + at;
  size_t off = chunk * sg->slot_size + at;   /* in the backup */
  if (!e->to_host) {
    memcpy(slot, e->host + off, n);
    return RAP_OK;
  }
  if (off + n > e->touched && sg->ops->prefault != NULL) {
    size_t from = off > e->touched ? off : e->touched;
    int st = sg->ops->prefault(sg->ctx, e->host + from, off + n - from);
    if (st != RAP_OK) return st;
  }
  memcpy(e->host + off, slot, n);
  return RAP_OK;
}

/* Under the lock: takes the next part there is, runs it with the lock let go, and counts it done
 * (after a failure the parts left are counted without being run). False when none is posted. */
static bool work_one_locked(engine *e) {
  if (e->take >= e->posted) return false;
  job *j = &e->jobs[e->take % e->sg->slots];
  size_t chunk = j->chunk, len = j->len, p = j->taken++;
  if (j->taken == j->parts) e->take++;
  bool skip = e->st != RAP_OK;
  pthread_mutex_unlock(&e->mu);
  int st = skip ? RAP_OK : run_part(e, chunk, len, p);
  pthread_mutex_lock(&e->mu);
  fail_locked(e, st);
  if (++j->done == j->parts) pthread_cond_broadcast(&e->done);
  return true;
}

static void *worker(void *arg) {
  engine *e = arg;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    if (work_one_locked(e)) continue;
    if (e->stop) break;
    pthread_cond_wait(&e->work, &e->mu);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* The caller waits for chunk c's job, taking parts itself while there are any. */
static void help_until(engine *e, size_t c) {
  pthread_mutex_lock(&e->mu);
  while (!job_done_locked(e, c))
    if (!work_one_locked(e)) pthread_cond_wait(&e->done, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

static void post(engine *e, size_t c) {
  pthread_mutex_lock(&e->mu);
  job *j = &e->jobs[c % e->sg->slots];
  j->chunk = c;
  j->len = chunk_len(e, c);
  j->parts = (j->len + e->sg->part - 1) / e->sg->part;
  j->taken = j->done = 0;
  e->posted = c + 1;
  pthread_cond_broadcast(&e->work);
  pthread_mutex_unlock(&e->mu);
}

/* The platform's copies of chunk c, between its slot and the runs, in order; then its mark. */
static int issue(engine *e, size_t c) {
  const rapi_stage *sg = e->sg;
  unsigned slot = (unsigned)(c % sg->slots);
  for (size_t at = 0, left = chunk_len(e, c); left > 0;) {
    if (e->run_off == e->run.size) {
      if (!e->runs->next(e->runs, &e->run))
        return rapi_fail(RAP_ERR_CORRUPT, "a staged copy: the runs end %zu bytes short of their "
                         "total", left);
      e->run_off = 0;
    }
    size_t k = e->run.size - e->run_off < left ? e->run.size - e->run_off : left;
    if (k > 0) {
      int st = sg->ops->queue(sg->ctx, slot, at, e->run.ptr + e->run_off, k, e->to_host);
      if (st != RAP_OK) return st;
    }
    at += k;
    left -= k;
    e->run_off += k;
  }
  return sg->ops->mark(sg->ctx, slot);
}

/* Sleep: a slot is filled once its last job is done; its job is posted once its mark is reached. */
static void sleep_loop(engine *e) {
  size_t slots = e->sg->slots, issued = 0, posted = 0;
  while (posted < e->chunks) {
    if (issued < e->chunks && (issued < slots || job_done(e, issued - slots))) {
      if (!step(e, issue(e, issued++))) return;
    } else if (posted < issued) {
      if (!step(e, e->sg->ops->wait(e->sg->ctx, (unsigned)(posted % slots)))) return;
      post(e, posted++);
    } else {
      help_until(e, issued - slots);
    }
  }
}

/* Wake: a done job's slot goes to the platform first; a job is posted once the platform's copy
 * out of its slot has passed, keeping one slot for a second copy in flight. */
static void wake_loop(engine *e) {
  size_t slots = e->sg->slots, ahead = slots > 2 ? slots - 1 : slots, issued = 0, posted = 0;
  while (issued < e->chunks) {
    if (issued < posted && job_done(e, issued)) {
      if (!step(e, issue(e, issued++))) return;
    } else if (posted < e->chunks && posted < issued + ahead) {
      if (posted >= slots && !step(e, e->sg->ops->wait(e->sg->ctx, (unsigned)(posted % slots))))
        return;
      post(e, posted++);
    } else {
      help_until(e, issued);
    }
  }
}

/* Starts up to want threads (fewer where the system refuses: the caller takes parts too). */
static unsigned start_threads(engine *e, pthread_t *tid, unsigned want) {
  unsigned n = 0;
  for (; n < want; n++)
    if (pthread_create(&tid[n], NULL, worker, e) != 0) {
      rap_log(RAP_LOG_DEBUG, "a staged copy runs with %u threads of the %u asked for", n, want);
      break;
    }
  return n;
}

int rapi_stage_copy(const rapi_stage *sg, char *host, size_t touched, rapi_runs *runs,
                    bool to_host) {
  engine e = {.sg = sg, .host = host, .touched = touched, .total = runs->total, .runs = runs,
              .to_host = to_host};
  if (e.total == 0) return RAP_OK;
  e.chunks = (e.total + sg->slot_size - 1) / sg->slot_size;
  size_t parts = (e.total + sg->part - 1) / sg->part;
  unsigned want = parts - 1 < sg->threads ? (unsigned)(parts - 1) : sg->threads;
  e.jobs = rapi_calloc(sg->slots, sizeof *e.jobs);
  pthread_t *tid = rapi_calloc(want ? want : 1, sizeof *tid);
  if (e.jobs == NULL || tid == NULL) {
    free(e.jobs);
    free(tid);
    return rapi_fail(RAP_ERR_NOMEM, "a staged copy of %zu bytes: out of host memory", e.total);
  }
  pthread_mutex_init(&e.mu, NULL);
  pthread_cond_init(&e.work, NULL);
  pthread_cond_init(&e.done, NULL);
  unsigned started = start_threads(&e, tid, want);
  if (to_host)
    sleep_loop(&e);
  else
    wake_loop(&e);
  size_t first = e.posted > sg->slots ? e.posted - sg->slots : 0;   /* older jobs are done */
  for (size_t c = first; c < e.posted; c++) help_until(&e, c);
  int fin = sg->ops->finish(sg->ctx);   /* after a failure too: nothing is left in flight */
  pthread_mutex_lock(&e.mu);
  e.stop = true;
  pthread_cond_broadcast(&e.work);
  pthread_mutex_unlock(&e.mu);
  for (unsigned i = 0; i < started; i++) pthread_join(tid[i], NULL);
  pthread_cond_destroy(&e.done);
  pthread_cond_destroy(&e.work);
  pthread_mutex_destroy(&e.mu);
  free(e.jobs);
  free(tid);
  if (e.st != RAP_OK) return rapi_fail(e.st, "%s", e.why);
  return fin;
}
