/* hier.c - hierarchical reduction for groups whose ranks span several hosts.
 *
 * Why: on one host, ranks reduce through symmetric memory (symmetric.c), which beats any
 * network backend; across hosts only a network backend (MPI, Gloo, NCCL) can. A flat
 * allreduce over all ranks would send every rank's data across the network. Instead:
 *   1. the ranks of each host sum their tensors through symmetric memory;
 *   2. one rank per host (its lowest, the "leader") all-reduces the host sums with the other
 *      hosts' leaders through the group's backend;
 *   3. the leader's result goes back to the host's other ranks through symmetric memory.
 * Network traffic shrinks by the number of ranks per host, and the backend sees one rank
 * per host, as in PyTorch's and Horovod's hierarchical allreduce.
 *
 * The layout (which ranks share a host) comes from an all_gather of host keys
 * (dist_host_key: host name and boot id, or EMBER_DIST_RANKS_PER_HOST=N, which treats each
 * N consecutive world ranks as one host, so the hierarchy can be tested on one machine).
 * It applies when the group spans more than one host and some host holds more than one
 * of its ranks; otherwise the flat paths serve as before. Results equal the flat
 * reduction's up to the order of floating-point additions (exact for integers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

struct dist_hier {
  int n_hosts;
  int local_size; /* ranks of g on this host */
  em_dist_group *local; /* those ranks, this host's leader first */
  em_dist_group *leaders; /* each host's leader; rank -1 on the other ranks */
};

static int is_member(const em_dist_group *g) { return g && g->rank >= 0; }

void dist_hier_free(dist_hier *h) {
  if (!h) return;
  em_dist_group_release(h->local);
  em_dist_group_release(h->leaders);
  free(h);
}

/* Groups g's ranks by host key: host_of[r] = the host index of rank r (hosts numbered by
 * their lowest rank), leader[k] = the lowest rank of host k. Returns the host count. */
static int group_hosts(const int64_t *keys, int n, int *host_of, int *leader) {
  int hosts = 0;
  for (int r = 0; r < n; r++) {
    host_of[r] = -1;
    for (int q = 0; q < r; q++)
      if (keys[q] == keys[r]) {
        host_of[r] = host_of[q];
        break;
      }
    if (host_of[r] < 0) {
      leader[hosts] = r;
      host_of[r] = hosts++;
    }
  }
  return hosts;
}

/* Collective over g: works out the layout and makes the subgroups (every rank makes every
 * host's group in host order, since new_group is collective over its parent). */
static em_status build(em_dist_group *g, dist_hier **out) {
  *out = NULL;
  int n = g->size;
  int64_t one = 1, count = n;
  em_tensor *mine = NULL, *all = NULL;
  int *host_of = malloc(sizeof(int) * n), *leader = malloc(sizeof(int) * n), *members = malloc(sizeof(int) * n);
  dist_hier *h = calloc(1, sizeof *h);
  em_status st = EM_OK;
  if (!host_of || !leader || !members || !h) {
    st = em_set_error(EM_ERR_MEMORY, "hierarchical all_reduce: out of memory");
    goto done;
  }
  if ((st = em_zeros(&mine, 1, &one, EM_INT64, (em_device){EM_CPU, 0})) ||
      (st = em_zeros(&all, 1, &count, EM_INT64, (em_device){EM_CPU, 0})))
    goto done;
  ((int64_t *)em_tensor_data(mine))[0] = dist_host_key(em_dist_world_rank_of(g, g->rank));
  if ((st = emp_dist_post(g, EM_DIST_OP_ALL_GATHER, mine, all, EM_DIST_SUM, -1, 0, NULL))) goto done;
  const int64_t *keys = em_tensor_data(all);
  int hosts = group_hosts(keys, n, host_of, leader);
  int crowded = 0;
  for (int k = 0; k < hosts; k++) {
    int m = 0;
    for (int r = 0; r < n; r++) m += host_of[r] == k;
    crowded |= m > 1;
  }
  if (hosts < 2 || !crowded) goto done; /* one host, or one rank per host: the flat paths fit */
  h->n_hosts = hosts;
  for (int k = 0; k < hosts; k++) {
    int m = 0;
    for (int r = 0; r < n; r++)
      if (host_of[r] == k) members[m++] = r;
    em_dist_group *sub = NULL;
    if ((st = em_dist_new_group(&sub, g, m, members))) goto done;
    if (host_of[g->rank] == k) {
      h->local = sub;
      h->local_size = m;
    } else {
      em_dist_group_release(sub);
    }
  }
  if ((st = em_dist_new_group(&h->leaders, g, hosts, leader))) goto done;
  *out = h;
  h = NULL;
done:
  dist_hier_free(h);
  em_tensor_release(mine);
  em_tensor_release(all);
  free(host_of);
  free(leader);
  free(members);
  return st;
}

em_status dist_hier_get(em_dist_group *g, dist_hier **out) {
  *out = NULL;
  if (!g || g->rank < 0 || g->size < 3) return EM_OK; /* two hosts of one rank at least: 3 ranks */
  if (!g->hier_state) {
    dist_hier *h = NULL;
    em_status st = build(g, &h);
    if (st) return st;
    g->hier = h;
    g->hier_state = h ? 1 : -1;
  }
  *out = g->hier;
  return EM_OK;
}

int dist_hier_is_leader(const dist_hier *h) { return h && is_member(h->leaders); }
em_dist_group *dist_hier_local(const dist_hier *h) { return h ? h->local : NULL; }

em_status dist_hier_cross(dist_hier *h, em_tensor *t, em_dist_redop op) {
  if (!is_member(h->leaders)) return EM_OK;
  return em_dist_all_reduce(h->leaders, t, op, NULL);
}

/* A plain all_reduce of a CPU tensor over g through the hierarchy; 0 when it does not
 * apply (the caller then uses the flat paths). */
int dist_hier_try_all_reduce(em_dist_group *g, em_tensor *t, em_dist_redop op, em_status *st) {
  if (t->storage->device.type != EM_CPU || !em_tensor_is_contiguous(t)) return 0;
  dist_hier *h = NULL;
  if ((*st = dist_hier_get(g, &h))) return 1;
  if (!h) return 0;
  /* avg: sums all the way, one scaling at the end (partial averages would weigh hosts of
   * different sizes wrongly) */
  em_dist_redop combine = op == EM_DIST_AVG ? EM_DIST_SUM : op;
  if (h->local_size > 1 && (*st = em_dist_all_reduce(h->local, t, combine, NULL))) return 1;
  if ((*st = dist_hier_cross(h, t, combine))) return 1;
  if (h->local_size > 1 && !dist_symm_try_broadcast(h->local, t, 0, st)) *st = em_dist_broadcast(h->local, t, 0, NULL);
  if (*st) return 1;
  if (op == EM_DIST_AVG) emp_dist_scale(em_tensor_data(t), em_tensor_numel(t), t->dtype, 1.0 / g->size);
  return 1;
}
