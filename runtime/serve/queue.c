/* queue.c - the server object, per-model request queues and dynamic batching.
 *
 * Each model has one FIFO of parsed requests under its own mutex. A worker asking for a
 * batch looks at the oldest request: the batch is that request plus the following ones of
 * the same shape, as many as fit in max_batch rows; it closes at once when they fill
 * max_batch rows (or no request of that shape could be added any more), else when the oldest
 * has waited max_delay_us, else when the server stops. Under the `spare` policy it also closes
 * at once while another worker of the model is idle too: waiting could only gather more rows
 * for a worker that has capacity to spare, so a lone request at light load is not held back
 * for the whole delay; with one worker free the delay bounds the wait as under `deadline`.
 * Requests of other shapes stay queued in their order and lead a later batch. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>
#include "ember/core.h"
#include "serve_impl.h"

static double now_s(void) { return em_clock_monotonic(); }

static void abs_deadline(struct timespec *ts, double seconds_from_now) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  if (seconds_from_now < 0) seconds_from_now = 0;
  time_t whole = (time_t)seconds_from_now;
  long nsec = ts->tv_nsec + (long)((seconds_from_now - (double)whole) * 1e9);
  ts->tv_sec += whole + nsec / 1000000000L;
  ts->tv_nsec = nsec % 1000000000L;
}

static void cond_init_monotonic(pthread_cond_t *c) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(c, &a);
  pthread_condattr_destroy(&a);
}

/* ---------------------------------------------------------------- server and models */
em_status em_serve_create(em_serve **out) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "em_serve_create: out is NULL");
  em_serve *s = calloc(1, sizeof *s);
  if (!s) return em_set_error(EM_ERR_MEMORY, "em_serve_create: out of memory");
  pthread_mutex_init(&s->wait_lock, NULL);
  cond_init_monotonic(&s->wait_cond);
  pthread_mutex_init(&s->metrics_lock, NULL);
  *out = s;
  return EM_OK;
}

void em_serve_destroy(em_serve *s) {
  if (!s) return;
  if (s->http) {
    sv_http_stop(s->http);
    sv_http_free(s->http);
  }
  if (s->zmq) {
    sv_zmq_stop(s->zmq);
    sv_zmq_free(s->zmq);
  }
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    for (sv_request *r = m->head, *next; r; r = next) { /* left by a shutdown that timed out */
      next = r->next;
      sv_request_release(r);
    }
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->metrics.lock);
    free(m);
  }
  pthread_mutex_destroy(&s->wait_lock);
  pthread_cond_destroy(&s->wait_cond);
  pthread_mutex_destroy(&s->metrics_lock);
  free(s->failure);
  free(s);
}

static sv_model *model_at(em_serve *s, int model, const char *op) {
  if (!s) {
    em_set_error(EM_ERR_ARGUMENT, "%s: the server is NULL", op);
    return NULL;
  }
  if (model < 0 || model >= s->n_models) {
    em_set_error(EM_ERR_INDEX, "%s: model %d does not exist (the server has %d)", op, model, s->n_models);
    return NULL;
  }
  return s->models[model];
}

em_status em_serve_add_model(em_serve *s, const char *name, int64_t max_batch, int64_t max_delay_us,
                             int64_t max_queue, int *index) {
  const char *op = "em_serve_add_model";
  if (!s || !index) return em_set_error(EM_ERR_ARGUMENT, "%s: the server or index is NULL", op);
  if (s->http || s->zmq) return em_set_error(EM_ERR_ARGUMENT, "%s: add models before listening", op);
  if (!sv_valid_name(name))
    return em_set_error(EM_ERR_ARGUMENT, "%s: model name '%s': expected 1 to %d of A-Z a-z 0-9 _ - .", op,
                        name ? name : "(null)", SV_NAME_MAX - 1);
  if (sv_find_model(s, name, strlen(name))) return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s' is already served", op, name);
  if (max_batch < 1 || max_delay_us < 0 || max_queue < 1)
    return em_set_error(EM_ERR_ARGUMENT,
                        "%s: model '%s': expected max_batch >= 1, max_delay_us >= 0, max_queue >= 1, got %lld, %lld, %lld",
                        op, name, (long long)max_batch, (long long)max_delay_us, (long long)max_queue);
  if (s->n_models >= SV_MAX_MODELS) return em_set_error(EM_ERR_ARGUMENT, "%s: at most %d models", op, SV_MAX_MODELS);
  sv_model *m = calloc(1, sizeof *m);
  if (!m) return em_set_error(EM_ERR_MEMORY, "%s: out of memory", op);
  strcpy(m->spec.name, name);
  m->spec.max_batch = max_batch;
  m->max_delay_us = max_delay_us;
  m->max_queue = max_queue;
  m->policy = EM_SERVE_DEADLINE;
  pthread_mutex_init(&m->lock, NULL);
  cond_init_monotonic(&m->cond);
  sv_metrics_init(&m->metrics);
  m->serving = m->last_version = 1;
  m->n_history = 1;
  m->history[0].number = 1;
  strcpy(m->history[0].state, "serving");
  *index = s->n_models;
  s->models[s->n_models++] = m;
  return EM_OK;
}

static em_status add_io(em_serve *s, int model, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                        int is_input) {
  const char *op = is_input ? "em_serve_add_input" : "em_serve_add_output";
  sv_model *m = model_at(s, model, op);
  if (!m) return em_last_status();
  if (s->http || s->zmq) return em_set_error(EM_ERR_ARGUMENT, "%s: declare inputs and outputs before listening", op);
  if (!sv_valid_name(name))
    return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s': name '%s': expected 1 to %d of A-Z a-z 0-9 _ - .", op,
                        m->spec.name, name ? name : "(null)", SV_NAME_MAX - 1);
  if (!sv_datatype_name(dtype))
    return em_set_error(EM_ERR_DTYPE, "%s: model '%s', '%s': dtype %s cannot be served (float32, float64, int32, "
                        "int64, uint8, bool)", op, m->spec.name, name, em_dtype_name(dtype));
  int *count = is_input ? &m->spec.n_inputs : &m->spec.n_outputs;
  sv_io *list = is_input ? m->spec.inputs : m->spec.outputs;
  if (*count >= SV_MAX_IO) return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s': at most %d", op, m->spec.name, SV_MAX_IO);
  for (int i = 0; i < *count; i++)
    if (!strcmp(list[i].name, name))
      return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s': '%s' is declared twice", op, m->spec.name, name);
  if (is_input) {
    if (ndim < 0 || ndim > SV_MAX_DIMS || (ndim && !shape))
      return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s', input '%s': expected 0 to %d dimensions, got %d", op,
                          m->spec.name, name, SV_MAX_DIMS, ndim);
    for (int d = 0; d < ndim; d++)
      if (shape[d] < -1)
        return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s', input '%s': shape[%d] is %lld (expected a size, or -1)",
                            op, m->spec.name, name, d, (long long)shape[d]);
  }
  sv_io *io = &list[*count];
  memset(io, 0, sizeof *io);
  strcpy(io->name, name);
  io->dtype = dtype;
  if (is_input) {
    io->ndim = ndim;
    for (int d = 0; d < ndim; d++) io->shape[d] = shape[d];
  }
  ++*count;
  return EM_OK;
}

em_status em_serve_add_input(em_serve *s, int model, const char *name, em_dtype dtype, int ndim, const int64_t *shape) {
  return add_io(s, model, name, dtype, ndim, shape, 1);
}

em_status em_serve_add_output(em_serve *s, int model, const char *name, em_dtype dtype) {
  return add_io(s, model, name, dtype, 0, NULL, 0);
}

em_status em_serve_model_policy(em_serve *s, int model, em_serve_policy policy) {
  const char *op = "em_serve_model_policy";
  sv_model *m = model_at(s, model, op);
  if (!m) return em_last_status();
  if (policy != EM_SERVE_DEADLINE && policy != EM_SERVE_SPARE)
    return em_set_error(EM_ERR_ARGUMENT, "%s: model '%s': policy %d: expected EM_SERVE_DEADLINE (0) or EM_SERVE_SPARE (1)",
                        op, m->spec.name, (int)policy);
  pthread_mutex_lock(&m->lock);
  m->policy = policy;
  pthread_mutex_unlock(&m->lock);
  return EM_OK;
}

em_status em_serve_model_ready(em_serve *s, int model) {
  sv_model *m = model_at(s, model, "em_serve_model_ready");
  if (!m) return em_last_status();
  pthread_mutex_lock(&m->lock);
  m->ready_workers++;
  pthread_mutex_unlock(&m->lock);
  return EM_OK;
}

sv_model *sv_find_model(em_serve *s, const char *name, size_t len) {
  for (int i = 0; i < s->n_models; i++)
    if (strlen(s->models[i]->spec.name) == len && !memcmp(s->models[i]->spec.name, name, len)) return s->models[i];
  return NULL;
}

int sv_all_ready(em_serve *s) {
  if (atomic_load(&s->stopping)) return 0;
  for (int i = 0; i < s->n_models; i++) {
    pthread_mutex_lock(&s->models[i]->lock);
    int ready = s->models[i]->ready_workers > 0 || s->models[i]->unloaded; /* the loaded ones count */
    pthread_mutex_unlock(&s->models[i]->lock);
    if (!ready) return 0;
  }
  return s->n_models > 0;
}

/* ---------------------------------------------------------------- queueing */
int sv_enqueue(em_serve *s, sv_model *m, sv_request *r, char *err, size_t errcap, void (*before_push)(void *),
               void *arg) {
  pthread_mutex_lock(&m->lock);
  if (atomic_load(&s->stopping)) {
    pthread_mutex_unlock(&m->lock);
    snprintf(err, errcap, "the server is shutting down");
    return 503;
  }
  if (m->unloaded) {
    pthread_mutex_unlock(&m->lock);
    snprintf(err, errcap, "model '%s' is unloaded: POST /v2/repository/models/%s/load loads a checkpoint", m->spec.name,
             m->spec.name);
    return 503;
  }
  if (m->queued >= m->max_queue) {
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_lock(&m->metrics.lock);
    m->metrics.rejected_full++;
    pthread_mutex_unlock(&m->metrics.lock);
    snprintf(err, errcap, "model '%s': the queue is full (%lld requests waiting): try again later", m->spec.name,
             (long long)m->max_queue);
    return 503;
  }
  if (before_push) before_push(arg);
  atomic_fetch_add(&r->refs, 1);
  r->t_arrived = now_s();
  r->next = NULL;
  if (m->tail) m->tail->next = r;
  else m->head = r;
  m->tail = r;
  m->queued++;
  atomic_fetch_add(&s->in_flight, 1);
  /* one request needs one worker: waking every idle one cost each of the others a wake-up
   * and a context switch per request (the one that takes a batch signals the next when more
   * wait; version tasks and shutdown broadcast) */
  pthread_cond_signal(&m->cond);
  pthread_mutex_unlock(&m->lock);
  return 200;
}

static int same_shape(const sv_model_spec *spec, const sv_request *a, const sv_request *b) {
  for (int i = 0; i < spec->n_inputs; i++)
    for (int d = 0; d < spec->inputs[i].ndim; d++)
      if (a->inner[i][d] != b->inner[i][d]) return 0;
  return 1;
}

/* With m->lock held: the rows the oldest request's shape group could put in one batch now,
 * and whether the group is closed (full, or a same-shape request does not fit). */
static int64_t group_rows(const sv_model *m, int *closed) {
  const sv_request *lead = m->head;
  int64_t rows = 0;
  *closed = 0;
  for (const sv_request *r = lead; r; r = r->next) {
    if (!same_shape(&m->spec, lead, r)) continue;
    if (rows + r->rows > m->spec.max_batch) {
      *closed = 1;
      break;
    }
    rows += r->rows;
  }
  if (rows >= m->spec.max_batch) *closed = 1;
  return rows;
}

/* With m->lock held: unlinks the oldest request's shape group (what fits) into a batch. */
static em_serve_batch *take_batch(em_serve *s, sv_model *m) {
  int closed;
  group_rows(m, &closed);
  em_serve_batch *b = calloc(1, sizeof *b);
  int cap = 0;
  for (const sv_request *r = m->head; r; r = r->next) cap++;
  if (!b || !(b->reqs = calloc((size_t)cap, sizeof *b->reqs))) {
    free(b);
    return NULL;
  }
  b->server = s;
  b->model = m;
  b->t_closed = now_s();
  sv_request *lead = m->head, *prev = NULL, *r = m->head;
  while (r) {
    sv_request *next = r->next;
    if (same_shape(&m->spec, lead, r)) {
      if (b->rows + r->rows > m->spec.max_batch) break;
      b->rows += r->rows;
      b->reqs[b->n++] = r;
      r->t_started = b->t_closed;
      if (prev) prev->next = next;
      else m->head = next;
      if (m->tail == r) m->tail = prev;
      m->queued--;
    } else {
      prev = r;
    }
    r = next;
  }
  return b;
}

/* The worker loop's wait: a version task first (when the worker passes its state), then a
 * batch that has closed, else sleep until one may close. */
static em_status next_work(em_serve *s, int model, int64_t *serving, int64_t *prepared, em_serve_batch **out,
                           em_serve_task *task, int64_t *version, const char *op) {
  *out = NULL;
  *task = EM_SERVE_STOP;
  sv_model *m = model_at(s, model, op);
  if (!m) return em_last_status();
  pthread_mutex_lock(&m->lock);
  m->idle++; /* this worker waits for work: the spare policy counts it */
  for (;;) {
    if (serving) {
      int t = sv_version_task(m, serving, prepared, version);
      if (t) {
        *task = (em_serve_task)t;
        break;
      }
    }
    if (!m->head) {
      if (atomic_load(&s->stopping)) break;
      pthread_cond_wait(&m->cond, &m->lock);
      continue;
    }
    int closed;
    group_rows(m, &closed);
    double waited = now_s() - m->head->t_arrived, delay = (double)m->max_delay_us * 1e-6;
    int spare = m->policy == EM_SERVE_SPARE && m->idle > 1;
    if (closed || spare || waited >= delay || atomic_load(&s->stopping)) {
      *out = take_batch(s, m);
      if (!*out) {
        m->idle--;
        pthread_mutex_unlock(&m->lock);
        return em_set_error(EM_ERR_MEMORY, "%s: model '%s': out of memory", op, m->spec.name);
      }
      (*out)->version = serving ? *serving : m->serving;
      *task = EM_SERVE_BATCH;
      /* another worker may take the next group at once */
      if (m->head) pthread_cond_signal(&m->cond);
      break;
    }
    struct timespec ts;
    abs_deadline(&ts, delay - waited);
    pthread_cond_timedwait(&m->cond, &m->lock, &ts);
  }
  m->idle--;
  pthread_mutex_unlock(&m->lock);
  return EM_OK;
}

em_status em_serve_next_batch(em_serve *s, int model, em_serve_batch **out) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "em_serve_next_batch: out is NULL");
  em_serve_task task;
  int64_t version;
  return next_work(s, model, NULL, NULL, out, &task, &version, "em_serve_next_batch");
}

em_status em_serve_next(em_serve *s, int model, int64_t *serving, int64_t *prepared, em_serve_batch **batch,
                        em_serve_task *task, int64_t *version) {
  if (!serving || !prepared || !batch || !task || !version)
    return em_set_error(EM_ERR_ARGUMENT, "em_serve_next: serving, prepared, batch, task or version is NULL");
  return next_work(s, model, serving, prepared, batch, task, version, "em_serve_next");
}

int64_t em_serve_batch_rows(const em_serve_batch *b) { return b ? b->rows : 0; }
int em_serve_batch_requests(const em_serve_batch *b) { return b ? b->n : 0; }

em_status em_serve_batch_input(em_serve_batch *b, int input, em_tensor **out) {
  if (!b || !out) return em_set_error(EM_ERR_ARGUMENT, "em_serve_batch_input: the batch or out is NULL");
  const sv_model_spec *spec = &b->model->spec;
  if (input < 0 || input >= spec->n_inputs)
    return em_set_error(EM_ERR_INDEX, "em_serve_batch_input: model '%s' has %d inputs, asked for input %d", spec->name,
                        spec->n_inputs, input);
  const sv_io *io = &spec->inputs[input];
  int64_t sizes[SV_MAX_DIMS + 1], per_row = 1;
  sizes[0] = b->rows;
  for (int d = 0; d < io->ndim; d++) {
    sizes[d + 1] = b->reqs[0]->inner[input][d];
    per_row *= sizes[d + 1];
  }
  em_device cpu = {EM_CPU, 0};
  em_status st = em_empty(out, io->ndim + 1, sizes, io->dtype, cpu);
  if (st) return st;
  char *dst = em_tensor_data(*out);
  size_t row_bytes = (size_t)per_row * em_dtype_size(io->dtype);
  for (int i = 0; i < b->n; i++) {
    size_t n = (size_t)b->reqs[i]->rows * row_bytes;
    if (n) memcpy(dst, b->reqs[i]->data[input], n);
    dst += n;
  }
  return EM_OK;
}

/* ---------------------------------------------------------------- answering */
void sv_deliver(em_serve *s, sv_request *r) {
  if (r->proto == SV_ZMQ) {
    if (s->zmq) sv_zmq_answer(s->zmq, r);
  } else {
    sv_http_answer(s, r);
  }
}

/* body: the HTTP answer's JSON; a ZeroMQ request gets its frames from the caller instead */
static void answer(em_serve *s, sv_model *m, sv_request *r, int status, char *body, size_t len) {
  r->status = status;
  if (r->proto == SV_HTTP) {
    free(r->body);
    r->body = body;
    r->body_len = len;
  }
  double t = now_s();
  pthread_mutex_lock(&m->metrics.lock);
  m->metrics.requests++;
  if (status >= 500) m->metrics.errors_5xx++;
  else if (status >= 400) m->metrics.errors_4xx++;
  sv_hist_time(&m->metrics.latency_s, t - r->t_arrived);
  pthread_mutex_unlock(&m->metrics.lock);
  sv_deliver(s, r);
  sv_request_release(r);
}

static char *error_body(const char *message, size_t *len) {
  sv_buf b = {0};
  sv_buf_puts(&b, "{\"error\":");
  sv_buf_json_string(&b, message);
  sv_buf_puts(&b, "}");
  *len = b.len;
  return b.data;
}

static void answer_error(em_serve *s, sv_model *m, sv_request *r, int status, const char *message) {
  if (r->proto == SV_ZMQ) {
    sv_wire_answer_error(r, m->spec.name, status, message);
    answer(s, m, r, status, NULL, 0);
  } else {
    size_t len;
    char *body = error_body(message, &len);
    answer(s, m, r, status, body, len);
  }
}

static void fail_all(em_serve_batch *b, const char *message) {
  for (int i = 0; i < b->n; i++) answer_error(b->server, b->model, b->reqs[i], 500, message);
}

static void free_batch(em_serve_batch *b) {
  free(b->reqs);
  free(b);
}

void em_serve_batch_fail(em_serve_batch *b, const char *message) {
  if (!b) return;
  char msg[SV_ERR_MAX];
  snprintf(msg, sizeof msg, "model '%s': %s", b->model->spec.name, message ? message : "the forward failed");
  fail_all(b, msg);
  free_batch(b);
}

static void record_batch(em_serve_batch *b, double compute_s) {
  sv_metrics *mt = &b->model->metrics;
  pthread_mutex_lock(&mt->lock);
  sv_hist_size(&mt->batch_rows, (double)b->rows);
  sv_hist_time(&mt->compute_s, compute_s);
  for (int i = 0; i < b->n; i++) sv_hist_time(&mt->queue_s, b->reqs[i]->t_started - b->reqs[i]->t_arrived);
  pthread_mutex_unlock(&mt->lock);
}

em_status em_serve_batch_complete(em_serve_batch *b, int n, em_tensor *const *outputs) {
  if (!b) return em_set_error(EM_ERR_ARGUMENT, "em_serve_batch_complete: the batch is NULL");
  const sv_model_spec *spec = &b->model->spec;
  record_batch(b, now_s() - b->t_closed);
  em_tensor *conv[SV_MAX_IO] = {0};
  em_status st = EM_OK;
  if (n != spec->n_outputs || (n && !outputs)) {
    st = em_set_error(EM_ERR_ARGUMENT, "em_serve_batch_complete: model '%s' declares %d outputs, the forward gave %d",
                      spec->name, spec->n_outputs, n);
  }
  for (int i = 0; !st && i < n; i++) {
    const em_tensor *t = outputs[i];
    if (!t || em_tensor_ndim(t) < 1 || em_tensor_size(t, 0) != b->rows) {
      st = em_set_error(EM_ERR_SHAPE, "em_serve_batch_complete: model '%s', output '%s': expected [%lld, ...] (one row per "
                        "batch row), got %d dimensions with %lld rows", spec->name, spec->outputs[i].name,
                        (long long)b->rows, t ? em_tensor_ndim(t) : 0, t && em_tensor_ndim(t) ? (long long)em_tensor_size(t, 0) : 0LL);
      break;
    }
    em_device cpu = {EM_CPU, 0};
    em_tensor *c = NULL;
    st = em_to(&c, t, spec->outputs[i].dtype, cpu);
    if (!st) {
      st = em_contiguous(&conv[i], c);
      em_tensor_release(c);
    }
  }
  if (st) {
    char msg[SV_ERR_MAX];
    snprintf(msg, sizeof msg, "%s", em_last_error());
    fail_all(b, msg);
  } else {
    int64_t row0 = 0;
    for (int i = 0; i < b->n; i++) {
      sv_request *r = b->reqs[i];
      int64_t rows = r->rows; /* r belongs to its connection once answered */
      r->version = b->version;
      if (r->proto == SV_ZMQ) {
        if (sv_wire_answer_result(r, spec, conv, row0))
          answer_error(b->server, b->model, r, 500, "out of memory writing the response");
        else
          answer(b->server, b->model, r, 200, NULL, 0);
      } else {
        sv_buf body = {0};
        if (sv_write_infer_response(&body, spec, r, conv, row0)) {
          free(body.data);
          answer_error(b->server, b->model, r, 500, "out of memory writing the response");
        } else {
          answer(b->server, b->model, r, 200, body.data, body.len);
        }
      }
      row0 += rows;
    }
  }
  for (int i = 0; i < SV_MAX_IO; i++)
    if (conv[i]) em_tensor_release(conv[i]);
  free_batch(b);
  return st;
}

/* ---------------------------------------------------------------- waiting and stopping */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig) {
  (void)sig;
  int saved = errno;
  if (signal_pipe[1] >= 0) {
    ssize_t w = write(signal_pipe[1], "x", 1);
    (void)w;
  }
  errno = saved;
}

em_status em_serve_wait(em_serve *s, int catch_signals) {
  if (!s) return em_set_error(EM_ERR_ARGUMENT, "em_serve_wait: the server is NULL");
  struct sigaction old_term, old_int;
  if (catch_signals) {
    if (signal_pipe[0] < 0 && pipe(signal_pipe))
      return em_set_error(EM_ERR_RUNTIME, "em_serve_wait: pipe failed: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
  }
  for (;;) {
    pthread_mutex_lock(&s->wait_lock);
    int stop = s->stop_requested;
    if (!stop && !catch_signals) pthread_cond_wait(&s->wait_cond, &s->wait_lock);
    else if (!stop) {
      struct timespec ts;
      abs_deadline(&ts, 0.05);
      pthread_cond_timedwait(&s->wait_cond, &s->wait_lock, &ts);
    }
    stop = s->stop_requested;
    pthread_mutex_unlock(&s->wait_lock);
    if (stop) break;
    if (catch_signals) {
      /* the handler only writes to the pipe; reading it here keeps the wait signal-safe */
      struct timeval tv = {0, 0};
      fd_set fds;
      FD_ZERO(&fds);
      FD_SET(signal_pipe[0], &fds);
      if (select(signal_pipe[0] + 1, &fds, NULL, NULL, &tv) > 0) {
        char c;
        ssize_t rd = read(signal_pipe[0], &c, 1);
        (void)rd;
        break;
      }
    }
  }
  if (catch_signals) {
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
  }
  return EM_OK;
}

void em_serve_stop(em_serve *s, const char *failure) {
  if (!s) return;
  pthread_mutex_lock(&s->wait_lock);
  if (failure && !s->failure) s->failure = strdup(failure);
  s->stop_requested = 1;
  pthread_cond_broadcast(&s->wait_cond);
  pthread_mutex_unlock(&s->wait_lock);
}

const char *em_serve_failure(const em_serve *s) { return s ? s->failure : NULL; }

em_status em_serve_shutdown(em_serve *s, double timeout_s) {
  if (!s) return em_set_error(EM_ERR_ARGUMENT, "em_serve_shutdown: the server is NULL");
  atomic_store(&s->stopping, 1);
  if (s->http) sv_http_quiesce(s->http);
  sv_versions_abort_all(s, "the server is shutting down");
  for (int i = 0; i < s->n_models; i++) {
    pthread_mutex_lock(&s->models[i]->lock);
    pthread_cond_broadcast(&s->models[i]->cond);
    pthread_mutex_unlock(&s->models[i]->lock);
  }
  /* accepted requests: answered by the workers, then written by the HTTP threads */
  double end = now_s() + timeout_s;
  while (atomic_load(&s->in_flight) > 0 && now_s() < end) usleep(2000);
  long left = atomic_load(&s->in_flight);
  if (s->http) sv_http_stop(s->http);
  if (s->zmq) sv_zmq_stop(s->zmq);
  if (left > 0)
    return em_set_error(EM_ERR_RUNTIME, "em_serve_shutdown: %ld requests were still unanswered after %.1f s", left,
                        timeout_s);
  return EM_OK;
}
