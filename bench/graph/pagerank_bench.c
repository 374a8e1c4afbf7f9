/* pagerank_bench.c - builds or loads a graph, runs PageRank, prints one JSON line.
 *
 *   pagerank_bench --scale 22 --edge-factor 16 [--seed 1] [--threads 2] [--iters 20]
 *                  [--tol 0] [--method jacobi|gauss-seidel|gapbs] [--reorder 0|1]
 *                  [--blocking auto|none|tiles|bins]
 *                  [--dedup] [--no-self-loops] [--undirected] [--save g.emg]
 *                  [--edges-npy prefix] [--scores out.f32] [--repeat 1]
 *   pagerank_bench --file graph.{txt,mtx,sg,emg} ...
 *
 * --edges-npy writes prefix_src.npy and prefix_dst.npy (int32, dense ids) for a peer to
 * read the same graph; --scores writes the float32 scores by dense id. Figures: build
 * seconds, ms per iteration, edges per second, peak resident memory (VmHWM). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ember/graph.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long peak_rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kib = atol(line + 6);
  if (f) fclose(f);
  return kib;
}

static int die(const char *what) {
  fprintf(stderr, "pagerank_bench: %s: %s\n", what, em_last_error());
  return 1;
}

static int write_npy(const char *path, const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  const int64_t *v = em_tensor_data(t);
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  char header[128];
  int len = snprintf(header, sizeof header, "{'descr': '<i4', 'fortran_order': False, 'shape': (%lld,), }",
                     (long long)n);
  int total = 10 + len + 1, pad = (64 - total % 64) % 64;
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  unsigned short hl = (unsigned short)(len + pad + 1);
  fwrite(&hl, 2, 1, f);
  fwrite(header, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  int32_t buf[4096];
  for (int64_t i = 0; i < n; i += 4096) {
    int64_t k = n - i < 4096 ? n - i : 4096;
    for (int64_t j = 0; j < k; j++) buf[j] = (int32_t)v[i + j];
    fwrite(buf, 4, (size_t)k, f);
  }
  return fclose(f);
}

int main(int argc, char **argv) {
  int scale = 22, ef = 16, threads = 2, iters = 20, repeat = 1;
  uint64_t seed = 1;
  const char *file = NULL, *save = NULL, *npy = NULL, *scores_path = NULL, *labels = NULL;
  em_graph_options go;
  em_graph_options_init(&go);
  go.progress = 0;
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.tol = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && v && ++i)
    if (ARG("--scale")) scale = atoi(v);
    else if (ARG("--edge-factor")) ef = atoi(v);
    else if (ARG("--seed")) seed = strtoull(v, NULL, 10);
    else if (ARG("--threads")) threads = atoi(v);
    else if (ARG("--iters")) iters = atoi(v);
    else if (ARG("--repeat")) repeat = atoi(v);
    else if (ARG("--tol")) po.tol = atof(v);
    else if (ARG("--file")) file = v;
    else if (ARG("--labels")) labels = v;
    else if (ARG("--save")) save = v;
    else if (ARG("--edges-npy")) npy = v;
    else if (ARG("--scores")) scores_path = v;
    else if (ARG("--reorder")) go.reorder = atoi(v);
    else if (ARG("--blocking"))
      po.blocking = !strcmp(v, "none")    ? EM_PAGERANK_BLOCKING_NONE
                    : !strcmp(v, "tiles") ? EM_PAGERANK_BLOCKING_TILES
                    : !strcmp(v, "bins")  ? EM_PAGERANK_BLOCKING_BINS
                                          : EM_PAGERANK_BLOCKING_AUTO;
    else if (ARG("--method"))
      po.method = !strcmp(v, "gauss-seidel") ? EM_PAGERANK_GAUSS_SEIDEL : !strcmp(v, "gapbs") ? EM_PAGERANK_GAPBS : EM_PAGERANK_JACOBI;
    else if (!strcmp(a, "--dedup")) go.drop_duplicates = 1;
    else if (!strcmp(a, "--no-self-loops")) go.drop_self_loops = 1;
    else if (!strcmp(a, "--undirected")) go.directed = 0;
    else if (!strcmp(a, "--reverse")) go.reverse = 1;
    else if (!strcmp(a, "--progress")) go.progress = 1;
    else {
      fprintf(stderr, "pagerank_bench: unknown argument '%s' (see the comment at the top of pagerank_bench.c)\n", a);
      return 2;
    }
  }
  po.max_iter = iters;
  em_set_num_threads(threads);
  em_graph *g = NULL;
  double t0 = now();
  if (file ? em_graph_load(&g, file, &go) : em_graph_kronecker(&g, scale, ef, seed, &go)) return die("build");
  if (labels && em_graph_load_labels(g, labels)) return die("labels");
  double build = now() - t0;
  long rss_build = peak_rss_kib();
  if (save) {
    t0 = now();
    if (em_graph_save(g, save)) return die("save");
    double saved = now() - t0;
    em_graph_free(g);
    g = NULL;
    go.format = EM_GRAPH_FORMAT_EMBER;
    t0 = now();
    if (em_graph_load(&g, save, &go)) return die("reload");
    fprintf(stderr, "saved in %.2f s, reloaded (checksums verified) in %.2f s\n", saved, now() - t0);
  }
  if (npy) {
    em_tensor *s = NULL, *d = NULL;
    char path[1024];
    if (em_graph_edges(g, &s, &d)) return die("edges");
    snprintf(path, sizeof path, "%s_src.npy", npy);
    if (write_npy(path, s)) return die("write npy");
    snprintf(path, sizeof path, "%s_dst.npy", npy);
    if (write_npy(path, d)) return die("write npy");
    em_tensor_release(s);
    em_tensor_release(d);
  }
  em_tensor *scores = NULL, *res = NULL;
  em_pagerank_stats st, best = {0};
  for (int r = 0; r < repeat; r++) {
    if (em_graph_pagerank(&scores, r == repeat - 1 ? &res : NULL, &st, g, &po)) return die("pagerank");
    if (r == 0 || st.seconds < best.seconds) best = st;
  }
  em_rank_comparison cmp;
  if (em_graph_compare_indegree(&cmp, g, scores, 100)) return die("compare");
  em_graph_ranked top[5];
  int64_t count;
  if (em_graph_topk(top, &count, scores, 5, g)) return die("topk");
  if (scores_path) {
    FILE *f = fopen(scores_path, "wb");
    if (!f || fwrite(em_tensor_data(scores), 4, (size_t)em_graph_num_vertices(g), f) != (size_t)em_graph_num_vertices(g))
      return die("write scores");
    fclose(f);
  }
  const double *rv = em_tensor_data(res);
  printf("{\"graph\": \"%s\", \"vertices\": %lld, \"arcs\": %lld, \"threads\": %d, \"build_s\": %.3f, "
         "\"build_peak_rss_mib\": %.0f, \"iterations\": %d, \"setup_s\": %.3f, \"ms_per_iter\": %.2f, \"ge_per_s\": %.3f, "
         "\"final_residual\": %.3e, \"first_residual\": %.3e, \"top1\": %lld, \"top1_score\": %.6g, "
         "\"engine\": \"%s\", \"overlap_top100_indegree\": %lld, \"kendall_tau_top100\": %.3f, \"peak_rss_mib\": %.0f}\n",
         file ? file : "kronecker", (long long)em_graph_num_vertices(g), (long long)em_graph_num_edges(g), threads, build,
         rss_build / 1024.0, best.iterations, best.setup_seconds, 1e3 * best.seconds / best.iterations,
         best.edges_per_second / 1e9, best.residual, rv[0], (long long)top[0].original_id, top[0].score,
         best.engine, (long long)cmp.overlap, cmp.kendall_tau, peak_rss_kib() / 1024.0);
  em_tensor_release(scores);
  em_tensor_release(res);
  em_graph_free(g);
  return 0;
}
