/* ipc_close.c — memory across processes, the importer's close: rap_ipc_close tells the exporter
 * that a block imported here is closed (its ticket set closed at once on the host, by a job on a
 * CPU queue, or by an interprocess event recorded on a CUDA stream), lets go of what no open block
 * uses, and the manager's end closes what is still open (rapi_ipc_manager_fini). The import's side
 * is ipc_import.c.
 */
#include "platforms/ipc_import.h"

/* ---- close ------------------------------------------------------------------------------------- */

typedef struct close_job {
  uint64_t *word;
  uint64_t from, to;
} close_job;

static void close_on_queue(void *arg) {
  close_job *j = arg;
  (void)cas(j->word, j->from, j->to);
  free(j);
}

/* Tells the exporter the block is closed, in r's order: at once on the host, by an interprocess
 * event on a CUDA stream (device memory), else by a job queued on r (a CPU queue; a stream's host
 * function for host memory, which kernels do not reach). */
static int signal_close(imp_pool *p, imp_ticket *tk, rap_resource *r, imp_event **used) {
  ipc_ticket *t = &p->ctl->tickets[tk->ticket];
  uint64_t serial = tw_serial(tk->word);
  uint32_t pid = tw_pid(tk->word);
  if (r == NULL || r->ops->record == NULL) {
    (void)cas(&t->word, tk->word, tword(serial, pid, T_DONE));
    return RAP_OK;
  }
  if (p->kind != RAPI_IPC_HOST && strcmp(r->ops->kind, "cuda") == 0) {
    imp_event *e = p->events;   /* one whose ticket moved on may be recorded again */
    while (e != NULL && LOAD(&p->ctl->tickets[e->ticket].word) == e->word) e = e->next;
    bool made = e == NULL;
    if (made && (e = rapi_calloc(1, sizeof *e)) == NULL)
      return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_close: out of host memory");
    int st = rapi_gpu_ipc_event_record(r, e->handle, &e->event);
    if (st != RAP_OK) {
      if (made) free(e);
      return st;
    }
    e->ticket = tk->ticket;
    e->word = tword(serial, pid, T_EVENT);
    if (made) {
      e->next = p->events;
      p->events = e;
    }
    memcpy(t->event, e->handle, sizeof t->event);
    (void)cas(&t->word, tk->word, e->word);
    *used = e;
    return RAP_OK;
  }
  close_job *j = rapi_malloc(sizeof *j);
  if (j == NULL) return rapi_fail(RAP_ERR_NOMEM, "rap_ipc_close: out of host memory");
  *j = (close_job){&t->word, tword(serial, pid, T_CLOSING), tword(serial, pid, T_DONE)};
  if (!cas(&t->word, tk->word, j->from)) {   /* the exporter took it back: nothing to tell */
    free(j);
    return RAP_OK;
  }
  int st = rap_resource_submit(r, close_on_queue, j);
  if (st != RAP_OK) {
    free(j);
    (void)cas(&t->word, tword(serial, pid, T_CLOSING), tk->word);
  }
  return st;
}

static void block_forget(struct rapi_ipc_importer *im, imp_block *b) {
  for (unsigned j = 0; j < b->nrows; j++) {
    b->pool->rows[b->rows[j]].refs--;
    rapi_imp_row_let_go(b->pool, b->rows[j]);
  }
  rapi_imp_rows_sweep(b->pool);
  HASH_DEL(im->blocks, b);
  free(b->rows);
  free(b);
}

/* Closes the newest open import of b on r (a CUDA stream, the host, NULL: the host). A pool's block
 * that is the last open one of its allocation frees the imported allocation first, in r's order,
 * so that the exporter's free, which waits for this close, comes after it (CUDA's rule). */
static int close_one(struct rapi_ipc_importer *im, imp_block *b, rap_resource *r) {
  imp_ticket *tk = b->tickets;
  imp_pool *p = b->pool;
  imp_alloc *al = b->alloc;
  bool cuda = r != NULL && r->ops->record != NULL && strcmp(r->ops->kind, "cuda") == 0;
  if (al != NULL && r != NULL && r->ops->record != NULL && !cuda)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_close: a block of a StreamOrdered pool is closed on "
                     "a CUDA stream or on the host, not on a %s resource", r->ops->kind);
  bool last = al != NULL && al->refs == 1;
  int st = last ? rapi_imp_alloc_free(p, al, cuda ? r : NULL) : RAP_OK;
  if (st != RAP_OK) return st;
  imp_event *used = NULL;
  st = signal_close(p, tk, al != NULL && !cuda ? NULL : r, &used);
  if (st != RAP_OK && last) {
    /* The allocation is given back already: the close is told once r's work is done. */
    rap_log(RAP_LOG_WARN, "rap_ipc_close: %s; waiting for the stream instead", rap_last_error());
    (void)rap_resource_synchronize(r);
    ipc_ticket *t = &p->ctl->tickets[tk->ticket];
    (void)cas(&t->word, tk->word, tword(tw_serial(tk->word), tw_pid(tk->word), T_DONE));
    st = RAP_OK;
  }
  if (st != RAP_OK) return st;
  if (last) {
    rapi_imp_alloc_drop(p, al);
  } else if (al != NULL) {
    al->refs--;
    if (used != NULL && rapi_imp_alloc_note(p, al, tk->ticket, used->word, used) != RAP_OK)
      (void)rap_resource_synchronize(r);   /* no room to note it: its work is done instead */
  }
  b->tickets = tk->next;
  free(tk);
  if (b->tickets == NULL) block_forget(im, b);
  return RAP_OK;
}

int rap_ipc_close(rap_manager *rm, void *ptr, rap_resource *r) {
  if (rm == NULL) return rapi_fail(RAP_ERR_INVALID, "rap_ipc_close: manager is NULL");
  if (r != NULL && r->rm != rm)
    return rapi_fail(RAP_ERR_INVALID, "rap_ipc_close: the resource belongs to another manager");
  struct rapi_ipc_importer *im = rm->ipc;
  imp_block *b = NULL;
  rapi_held held;
  if (im != NULL) {
    rapi_lock(&im->lock, &held);
    HASH_FIND_PTR(im->blocks, &ptr, b);
  }
  if (b == NULL) {
    if (im != NULL) rapi_unlock(&held);
    return rapi_fail(RAP_ERR_UNKNOWN_POINTER, "rap_ipc_close: %p is not a block this manager "
                     "imported, or it was closed already", ptr);
  }
  int st = close_one(im, b, r != NULL ? r : b->tickets->r);
  rapi_unlock(&held);
  return st;
}

/* An import keeps the resource it was given for its close, as a block keeps the resource that
 * owns it: while one is open, r is not destroyed. */
int rapi_ipc_resource_busy(rap_resource *r) {
  pthread_mutex_lock(&rapi_imp_make_lock);
  struct rapi_ipc_importer *im = r->rm->ipc;
  pthread_mutex_unlock(&rapi_imp_make_lock);
  if (im == NULL) return RAP_OK;
  size_t n = 0;
  void *first = NULL;
  rapi_held held;
  rapi_lock(&im->lock, &held);
  for (imp_block *b = im->blocks; b != NULL; b = b->hh.next)
    for (imp_ticket *tk = b->tickets; tk != NULL; tk = tk->next)
      if (tk->r == r && n++ == 0) first = b->ptr;
  rapi_unlock(&held);
  if (n == 0) return RAP_OK;
  return rapi_fail(RAP_ERR_BUSY, "rap_resource_destroy: %zu import%s of another process's block "
                   "(rap_ipc_import) %s this %s resource for %s close, the first at %p; "
                   "rap_ipc_close %s first", n, n == 1 ? "" : "s", n == 1 ? "was given" : "were given",
                   r->ops->kind, n == 1 ? "its" : "their", first, n == 1 ? "it" : "them");
}

/* The manager goes, its resources synchronized: what is still open here is closed (its work has
 * passed), events are waited for and the exporter told, and every pool is let go. */
void rapi_ipc_manager_fini(rap_manager *rm) {
  struct rapi_ipc_importer *im = rm->ipc;
  if (im == NULL) return;
  imp_block *b, *tmp;
  HASH_ITER(hh, im->blocks, b, tmp) {
    if (b->tickets == NULL) {
      block_forget(im, b);
      continue;
    }
    rap_log(RAP_LOG_WARN, "rap_manager_destroy: an imported block at %p was not closed; closed "
              "now", b->ptr);
    bool gone = false;
    while (!gone && b->tickets != NULL) {
      gone = b->tickets->next == NULL;   /* the last close forgets b */
      if (close_one(im, b, NULL) == RAP_OK) continue;
      rap_log(RAP_LOG_WARN, "rap_manager_destroy: %s", rap_last_error());
      imp_ticket *tk = b->tickets;   /* told as closed: this process's work on it is done */
      imp_event *used = NULL;
      (void)signal_close(b->pool, tk, NULL, &used);
      if (b->alloc != NULL && --b->alloc->refs == 0) rapi_imp_alloc_drop(b->pool, b->alloc);
      b->tickets = tk->next;
      free(tk);
      if (b->tickets == NULL) block_forget(im, b);
    }
  }
  while (im->pools != NULL) {
    imp_pool *p = im->pools;
    im->pools = p->next;
    while (p->events != NULL) {
      imp_event *e = p->events;
      p->events = e->next;
      ipc_ticket *t = &p->ctl->tickets[e->ticket];
      if (rapi_gpu_ipc_event_synchronize(e->event) == RAP_OK)
        (void)cas(&t->word, e->word, tword(tw_serial(e->word), tw_pid(e->word), T_DONE));
      rapi_gpu_ipc_event_destroy(e->event);
      free(e);
    }
    rapi_imp_pool_free(p);
  }
  pthread_mutex_destroy(&im->lock);
  free(im);
  rm->ipc = NULL;
}
