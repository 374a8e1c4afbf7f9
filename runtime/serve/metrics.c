/* metrics.c - per-model counters and histograms, written in the Prometheus text format.
 *
 * Times in seconds with buckets from 50 us to 10 s (a CPU model's forward is tens of
 * microseconds to tens of milliseconds); batch sizes in powers of two up to 1024 rows. */
#include <stdlib.h>
#include <string.h>
#include "serve_impl.h"

static const double time_bounds[SV_TIME_BUCKETS] = {5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                                                    2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};
static const double size_bounds[SV_SIZE_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};

void sv_metrics_init(sv_metrics *m) {
  memset(m, 0, sizeof *m);
  pthread_mutex_init(&m->lock, NULL);
}

static void observe(sv_hist *h, const double *bounds, int n, double v) {
  int k = 0;
  while (k < n && v > bounds[k]) k++;
  h->counts[k]++;
  h->sum += v;
  h->n++;
}

void sv_hist_time(sv_hist *h, double seconds) { observe(h, time_bounds, SV_TIME_BUCKETS, seconds); }
void sv_hist_size(sv_hist *h, double rows) { observe(h, size_bounds, SV_SIZE_BUCKETS, rows); }

static void write_hist(sv_buf *b, const char *metric, const char *model, const sv_hist *h, const double *bounds,
                       int n) {
  uint64_t cum = 0;
  for (int k = 0; k < n; k++) {
    cum += h->counts[k];
    sv_buf_printf(b, "%s_bucket{model=\"%s\",le=\"%g\"} %llu\n", metric, model, bounds[k], (unsigned long long)cum);
  }
  cum += h->counts[n];
  sv_buf_printf(b, "%s_bucket{model=\"%s\",le=\"+Inf\"} %llu\n", metric, model, (unsigned long long)cum);
  sv_buf_printf(b, "%s_sum{model=\"%s\"} %.9g\n", metric, model, h->sum);
  sv_buf_printf(b, "%s_count{model=\"%s\"} %llu\n", metric, model, (unsigned long long)h->n);
}

void sv_count_http_error(em_serve *s, int status) {
  pthread_mutex_lock(&s->metrics_lock);
  if (status == 404) s->http_errors_404++;
  else if (status == 503) s->http_errors_503++;
  else s->http_errors_400++;
  pthread_mutex_unlock(&s->metrics_lock);
}

typedef struct hist_def {
  const char *metric, *help;
  size_t offset;
  int is_size;
} hist_def;

char *em_serve_metrics_text(em_serve *s) {
  if (!s) return NULL;
  sv_buf b = {0};
  /* model names are checked (sv_valid_name), so they need no escaping in labels */
  sv_buf_puts(&b, "# HELP ember_serve_requests_total Inference requests answered (any status), by model.\n"
                  "# TYPE ember_serve_requests_total counter\n");
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    pthread_mutex_lock(&m->metrics.lock);
    sv_buf_printf(&b, "ember_serve_requests_total{model=\"%s\"} %llu\n", m->spec.name,
                  (unsigned long long)m->metrics.requests);
    pthread_mutex_unlock(&m->metrics.lock);
  }
  sv_buf_puts(&b, "# HELP ember_serve_errors_total Requests answered with an error, by model and kind "
                  "(client: 4xx, server: 5xx, queue_full: 503 at once).\n"
                  "# TYPE ember_serve_errors_total counter\n");
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    pthread_mutex_lock(&m->metrics.lock);
    sv_buf_printf(&b, "ember_serve_errors_total{model=\"%s\",kind=\"client\"} %llu\n", m->spec.name,
                  (unsigned long long)m->metrics.errors_4xx);
    sv_buf_printf(&b, "ember_serve_errors_total{model=\"%s\",kind=\"server\"} %llu\n", m->spec.name,
                  (unsigned long long)m->metrics.errors_5xx);
    sv_buf_printf(&b, "ember_serve_errors_total{model=\"%s\",kind=\"queue_full\"} %llu\n", m->spec.name,
                  (unsigned long long)m->metrics.rejected_full);
    pthread_mutex_unlock(&m->metrics.lock);
  }
  pthread_mutex_lock(&s->metrics_lock);
  sv_buf_printf(&b,
                "# HELP ember_serve_http_errors_total Requests refused before reaching a model queue, by status.\n"
                "# TYPE ember_serve_http_errors_total counter\n"
                "ember_serve_http_errors_total{code=\"400\"} %llu\n"
                "ember_serve_http_errors_total{code=\"404\"} %llu\n"
                "ember_serve_http_errors_total{code=\"503\"} %llu\n",
                (unsigned long long)s->http_errors_400, (unsigned long long)s->http_errors_404,
                (unsigned long long)s->http_errors_503);
  pthread_mutex_unlock(&s->metrics_lock);
  static const hist_def hists[] = {
      {"ember_serve_queue_seconds", "Time a request waited in its model's queue before its batch closed.",
       offsetof(sv_metrics, queue_s), 0},
      {"ember_serve_compute_seconds", "Time from a batch closing to its outputs being handed back (one forward).",
       offsetof(sv_metrics, compute_s), 0},
      {"ember_serve_request_seconds", "Time from a request being queued to its answer being ready.",
       offsetof(sv_metrics, latency_s), 0},
      {"ember_serve_batch_size", "Rows per batch.", offsetof(sv_metrics, batch_rows), 1},
  };
  for (size_t h = 0; h < sizeof hists / sizeof *hists; h++) {
    sv_buf_printf(&b, "# HELP %s %s\n# TYPE %s histogram\n", hists[h].metric, hists[h].help, hists[h].metric);
    for (int i = 0; i < s->n_models; i++) {
      sv_model *m = s->models[i];
      pthread_mutex_lock(&m->metrics.lock);
      sv_hist copy = *(const sv_hist *)((const char *)&m->metrics + hists[h].offset);
      pthread_mutex_unlock(&m->metrics.lock);
      if (hists[h].is_size) write_hist(&b, hists[h].metric, m->spec.name, &copy, size_bounds, SV_SIZE_BUCKETS);
      else write_hist(&b, hists[h].metric, m->spec.name, &copy, time_bounds, SV_TIME_BUCKETS);
    }
  }
  sv_buf_puts(&b, "# HELP ember_serve_queue_depth Requests waiting in each model's queue.\n"
                  "# TYPE ember_serve_queue_depth gauge\n");
  for (int i = 0; i < s->n_models; i++) {
    sv_model *m = s->models[i];
    pthread_mutex_lock(&m->lock);
    sv_buf_printf(&b, "ember_serve_queue_depth{model=\"%s\"} %lld\n", m->spec.name, (long long)m->queued);
    pthread_mutex_unlock(&m->lock);
  }
  if (b.failed) {
    free(b.data);
    return NULL;
  }
  return b.data;
}

void em_serve_free_string(char *text) { free(text); }
