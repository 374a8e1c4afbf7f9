/* versions.c - model versions: a new checkpoint is loaded beside the serving one, then
 * swapped in between batches, or dropped with the reason.
 *
 * A load (POST /v2/repository/models/NAME/load) makes version N+1 pending. Every worker of
 * the model is told, between two batches, to load it beside the model it serves
 * (em_serve_next answers EM_SERVE_LOAD); the worker builds the new model, loads the
 * checkpoint, runs a probe forward, compares its outputs' shapes with the serving
 * version's, and reports (em_serve_version_prepared) while it goes on serving the old one.
 * When every worker has it, the version becomes the serving one and each worker swaps at
 * its next batch (EM_SERVE_SWAP): a request is answered by the old or by the new version,
 * never dropped. The first failure drops the pending version on every worker
 * (EM_SERVE_DISCARD); the old one keeps serving and the load's answer says why.
 * An unload (POST /v2/repository/models/NAME/unload) refuses new requests (503); once the
 * queue is empty each worker drops its model (EM_SERVE_UNLOAD); a later load brings a version
 * back. Loads and unloads come over ZeroMQ too (wire.c's LOAD and UNLOAD). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ember/core.h"
#include "serve_impl.h"

static sv_model *model_of(em_serve *s, int model, const char *op) {
  if (!s || model < 0 || model >= s->n_models) {
    em_set_error(EM_ERR_INDEX, "%s: model %d does not exist (the server has %d)", op, model, s ? s->n_models : 0);
    return NULL;
  }
  return s->models[model];
}

/* With m->lock held. */
static sv_version *find_version(sv_model *m, int64_t number) {
  for (int i = 0; i < m->n_history; i++)
    if (m->history[i].number == number) return &m->history[i];
  return NULL;
}

/* With m->lock held: a new history entry, dropping the oldest that is not serving when full. */
static sv_version *add_version(sv_model *m, int64_t number, const char *path, const char *state) {
  if (m->n_history == SV_VERSIONS_KEPT) {
    int drop = 0;
    while (drop < m->n_history - 1 && m->history[drop].number == m->serving) drop++;
    memmove(&m->history[drop], &m->history[drop + 1], (size_t)(m->n_history - drop - 1) * sizeof *m->history);
    m->n_history--;
  }
  sv_version *v = &m->history[m->n_history++];
  memset(v, 0, sizeof *v);
  v->number = number;
  snprintf(v->path, sizeof v->path, "%s", path ? path : "");
  snprintf(v->state, sizeof v->state, "%s", state);
  return v;
}

em_status em_serve_model_source(em_serve *s, int model, int workers, const char *checkpoint) {
  sv_model *m = model_of(s, model, "em_serve_model_source");
  if (!m) return em_last_status();
  if (workers < 1)
    return em_set_error(EM_ERR_ARGUMENT, "em_serve_model_source: model '%s': expected workers >= 1, got %d",
                        m->spec.name, workers);
  pthread_mutex_lock(&m->lock);
  m->workers = workers;
  sv_version *v = find_version(m, 1);
  if (v) snprintf(v->path, sizeof v->path, "%s", checkpoint ? checkpoint : "");
  snprintf(m->source, sizeof m->source, "%s", checkpoint ? checkpoint : "");
  pthread_mutex_unlock(&m->lock);
  return EM_OK;
}

/* With m->lock held: answers every waiting load request with status: over HTTP with the JSON
 * body, over ZeroMQ with a RESULT naming the version (200) or an ERROR with the message. */
static void answer_waiters(em_serve *s, sv_model *m, int status, const char *body, int64_t version,
                           const char *message) {
  sv_request *r = m->load_waiters;
  m->load_waiters = NULL;
  while (r) {
    sv_request *next = r->out_next;
    if (r->proto == SV_ZMQ) {
      if (status == 200) {
        sv_buf b = {0};
        int nf = sv_wire_write_tensor_frames(&b, r->frame_len, SV_WIRE_RESULT, r->wire_id, version, 200, m->spec.name, 0,
                                             NULL, NULL, 0, -1);
        free(r->body);
        r->body = nf < 0 ? NULL : b.data;
        r->nframes = nf < 0 ? 0 : nf;
        if (nf < 0) free(b.data);
        r->status = 200;
      } else {
        sv_wire_answer_error(r, m->spec.name, status, message);
      }
    } else {
      r->status = status;
      free(r->body);
      r->body = strdup(body);
      r->body_len = r->body ? strlen(body) : 0;
    }
    sv_deliver(s, r);
    sv_request_release(r);
    r = next;
  }
}

/* With m->lock held: the pending version failed (why); the serving one stays. */
static void abort_pending(em_serve *s, sv_model *m, int status, const char *why) {
  sv_version *v = find_version(m, m->pending);
  char msg[SV_ERR_MAX + SV_PATH_MAX + 160];
  snprintf(msg, sizeof msg, "model '%s': version %lld (%s) was not loaded: %s; version %lld keeps serving",
           m->spec.name, (long long)m->pending, v ? v->path : "?", why, (long long)m->serving);
  if (v) {
    snprintf(v->state, sizeof v->state, "failed");
    snprintf(v->reason, sizeof v->reason, "%s", why);
  }
  m->pending = 0;
  sv_buf b = {0};
  sv_buf_puts(&b, "{\"error\":");
  sv_buf_json_string(&b, msg);
  sv_buf_puts(&b, "}");
  answer_waiters(s, m, status, b.data ? b.data : "{}", 0, msg);
  free(b.data);
  pthread_cond_broadcast(&m->cond);
}

int sv_version_load(em_serve *s, sv_model *m, const char *path, sv_request *r, void (*before_wait)(void *),
                    void *arg, char *err, size_t errcap) {
  pthread_mutex_lock(&m->lock);
  int status = 0;
  if (atomic_load(&s->stopping)) {
    snprintf(err, errcap, "the server is shutting down");
    status = 503;
  } else if (m->pending) {
    snprintf(err, errcap, "model '%s': version %lld is being loaded; try again when it is done", m->spec.name,
             (long long)m->pending);
    status = 409;
  } else if (m->ready_workers < (m->workers ? m->workers : 1)) {
    snprintf(err, errcap, "model '%s': its workers are still loading version %lld; try again when it is ready",
             m->spec.name, (long long)m->serving);
    status = 503;
  } else if (path && strlen(path) >= SV_PATH_MAX) {
    snprintf(err, errcap, "parameters.checkpoint: a path of %zu bytes, at most %d", strlen(path), SV_PATH_MAX - 1);
    status = 400;
  } else if ((!path || !*path) && !m->source[0]) {
    snprintf(err, errcap, "model '%s' was started without a checkpoint: name one (parameters.checkpoint)",
             m->spec.name);
    status = 400;
  }
  if (status) {
    pthread_mutex_unlock(&m->lock);
    return status;
  }
  m->pending = ++m->last_version;
  m->prepared = 0;
  add_version(m, m->pending, path && *path ? path : m->source, "loading");
  if (before_wait) before_wait(arg);
  atomic_fetch_add(&r->refs, 1);
  atomic_fetch_add(&s->in_flight, 1);
  r->out_next = m->load_waiters;
  m->load_waiters = r;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  return 0;
}

void sv_versions_abort_all(em_serve *s, const char *why) {
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    pthread_mutex_lock(&m->lock);
    if (m->pending) abort_pending(s, m, 503, why);
    pthread_mutex_unlock(&m->lock);
  }
}

int sv_version_unload(em_serve *s, sv_model *m, int64_t *version, char *err, size_t errcap) {
  pthread_mutex_lock(&m->lock);
  int status = 0;
  if (atomic_load(&s->stopping)) {
    snprintf(err, errcap, "the server is shutting down");
    status = 503;
  } else if (m->pending) {
    snprintf(err, errcap, "model '%s': version %lld is being loaded; unload it when that is done", m->spec.name,
             (long long)m->pending);
    status = 409;
  } else {
    *version = m->serving;
    if (!m->unloaded) {
      m->unloaded = 1;
      sv_version *v = find_version(m, m->serving);
      if (v) snprintf(v->state, sizeof v->state, "unloaded");
      pthread_cond_broadcast(&m->cond); /* idle workers drop the model now */
    }
  }
  pthread_mutex_unlock(&m->lock);
  return status;
}

int sv_version_task(sv_model *m, int64_t *serving, int64_t *prepared, int64_t *version) {
  if (*prepared && *prepared == m->serving && *serving != m->serving) {
    *version = *serving = *prepared;
    *prepared = 0;
    return EM_SERVE_SWAP;
  }
  if (*prepared && *prepared != m->pending && *prepared != m->serving) {
    *version = *prepared;
    *prepared = 0;
    return EM_SERVE_DISCARD;
  }
  if (m->unloaded && *serving && !m->head && !m->pending) { /* the queued requests are answered first */
    *version = *serving;
    *serving = 0;
    return EM_SERVE_UNLOAD;
  }
  if (m->pending && *prepared != m->pending && *serving != m->pending) {
    /* asked once: its report either prepares it or (a failure) clears pending */
    *version = m->pending;
    return EM_SERVE_LOAD;
  }
  return 0;
}

em_status em_serve_version_path(em_serve *s, int model, int64_t version, char *buf, size_t cap) {
  sv_model *m = model_of(s, model, "em_serve_version_path");
  if (!m) return em_last_status();
  if (!buf || cap == 0) return em_set_error(EM_ERR_ARGUMENT, "em_serve_version_path: buf is NULL or empty");
  pthread_mutex_lock(&m->lock);
  sv_version *v = find_version(m, version);
  if (v) snprintf(buf, cap, "%s", v->path);
  pthread_mutex_unlock(&m->lock);
  if (!v)
    return em_set_error(EM_ERR_INDEX, "em_serve_version_path: model '%s' has no version %lld", m->spec.name,
                        (long long)version);
  return EM_OK;
}

em_status em_serve_version_prepared(em_serve *s, int model, int64_t version, int ok, const char *message) {
  sv_model *m = model_of(s, model, "em_serve_version_prepared");
  if (!m) return em_last_status();
  pthread_mutex_lock(&m->lock);
  if (version == m->pending) {
    if (!ok) {
      abort_pending(s, m, 400, message && *message ? message : "a worker could not load it");
    } else if (++m->prepared >= (m->workers ? m->workers : m->ready_workers)) {
      sv_version *old = find_version(m, m->serving), *v = find_version(m, m->pending);
      if (old && !strcmp(old->state, "serving")) snprintf(old->state, sizeof old->state, "retired");
      m->unloaded = 0;
      if (v) snprintf(v->state, sizeof v->state, "serving");
      int64_t before = m->serving;
      m->serving = m->pending;
      m->pending = 0;
      sv_buf b = {0};
      sv_buf_puts(&b, "{\"model_name\":");
      sv_buf_json_string(&b, m->spec.name);
      sv_buf_printf(&b, ",\"version\":\"%lld\",\"replaced\":\"%lld\",\"checkpoint\":", (long long)m->serving,
                    (long long)before);
      sv_buf_json_string(&b, v ? v->path : "");
      sv_buf_puts(&b, "}");
      answer_waiters(s, m, 200, b.data ? b.data : "{}", m->serving, NULL);
      free(b.data);
      pthread_cond_broadcast(&m->cond);
    }
  }
  pthread_mutex_unlock(&m->lock);
  return EM_OK;
}

void sv_write_versions(sv_buf *b, sv_model *m) {
  pthread_mutex_lock(&m->lock);
  if (m->unloaded) sv_buf_puts(b, "\"versions\":[],\"version_history\":[");
  else sv_buf_printf(b, "\"versions\":[\"%lld\"],\"version_history\":[", (long long)m->serving);
  for (int i = 0; i < m->n_history; i++) {
    const sv_version *v = &m->history[i];
    sv_buf_printf(b, "%s{\"version\":\"%lld\",\"state\":\"%s\",\"checkpoint\":", i ? "," : "", (long long)v->number,
                  v->state);
    sv_buf_json_string(b, v->path);
    if (v->reason[0]) {
      sv_buf_puts(b, ",\"reason\":");
      sv_buf_json_string(b, v->reason);
    }
    sv_buf_puts(b, "}");
  }
  sv_buf_puts(b, "]");
  pthread_mutex_unlock(&m->lock);
}

void sv_write_repository_index(sv_buf *b, em_serve *s, int ready_only) {
  int first = 1, stopping = atomic_load(&s->stopping);
  sv_buf_puts(b, "[");
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    pthread_mutex_lock(&m->lock);
    int ready = m->ready_workers > 0 && !m->unloaded && !stopping;
    const char *reason = ready ? NULL : m->unloaded ? "unloaded" : stopping ? "shutting down" : "loading";
    int64_t version = m->unloaded ? m->last_version : m->serving;
    if (ready || !ready_only) {
      sv_buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
      sv_buf_json_string(b, m->spec.name);
      sv_buf_printf(b, ",\"version\":\"%lld\",\"state\":\"%s\"", (long long)version,
                    ready ? "READY" : "UNAVAILABLE");
      if (reason) sv_buf_printf(b, ",\"reason\":\"%s\"", reason);
      sv_buf_puts(b, "}");
      first = 0;
    }
    pthread_mutex_unlock(&m->lock);
  }
  sv_buf_puts(b, "]");
}
