/* fuzz_graph.h - what the graph harnesses do with a graph that loaded: everything that
 * walks its structure (edges, degrees, ids, labels, PageRank's gather, top k). */
#ifndef EMBER_FUZZ_GRAPH_H
#define EMBER_FUZZ_GRAPH_H
#include "fuzz.h"
#include "ember/graph.h"
#include "ember/tensor.h"

static inline void fz_use_graph(em_graph *g) {
  em_tensor *a = NULL, *b = NULL;
  if (em_graph_edges(g, &a, &b) == EM_OK) em_tensor_release(a), em_tensor_release(b);
  a = b = NULL;
  if (em_graph_degrees(g, &a, &b) == EM_OK) em_tensor_release(a), em_tensor_release(b);
  a = NULL;
  if (em_graph_original_ids(g, &a) == EM_OK) em_tensor_release(a);
  int64_t n = em_graph_num_vertices(g);
  for (int64_t v = 0; v < n && v < 64; v++) {
    const char *l = em_graph_label(g, v);
    if (l) (void)strlen(l);
    int64_t back;
    em_graph_find_vertex(g, em_graph_original_id(g, v), &back);
  }
  a = NULL;
  if (em_graph_edge_weights(g, &a) == EM_OK) em_tensor_release(a);
  em_pagerank_options po;
  em_pagerank_options_init(&po);
  po.max_iter = 3;
  /* weighted graphs: the weighted iteration (auto) and the unweighted one */
  for (int weights = EM_PAGERANK_WEIGHTS_AUTO; weights <= (em_graph_is_weighted(g) ? EM_PAGERANK_WEIGHTS_OFF : 0);
       weights += 2) {
    po.weights = weights;
    em_tensor *scores = NULL;
    if (em_graph_pagerank(&scores, NULL, NULL, g, &po) == EM_OK) {
      em_graph_ranked top[4];
      int64_t count = 0;
      em_graph_topk(top, &count, scores, 4, g);
      em_tensor_release(scores);
    }
  }
}

/* Loads the file at path in `format`, with the CSR in dense order and reordered, then
 * once more ignoring its weights (values and third columns read as before weights). */
static inline void fz_load_graph(const char *path, int format, int verify) {
  for (int pass = 0; pass <= 2; pass++) {
    int reorder = pass == 1;
    em_graph_options o;
    em_graph_options_init(&o);
    o.format = format;
    o.progress = 0;
    o.reorder = reorder;
    o.verify = verify;
    o.drop_duplicates = reorder; /* the rebuild path too, once (weights added) */
    o.weights = pass < 2;
    em_graph *g = NULL;
    if (fz_failed(em_graph_load(&g, path, &o))) continue;
    fz_use_graph(g);
    em_graph_free(g);
  }
}
#endif
