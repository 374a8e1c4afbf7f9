/* group.c - the world and its subgroups: launcher discovery, backend choice, loading the
 * MPI and Gloo plugins, attaching NCCL for CUDA tensors, shutdown at exit.
 *
 * The MPI backend is a separate shared object (libember_mpi.so next to libember.so, or
 * EMBER_MPI_PLUGIN) opened with dlopen the first time a process initialises the world
 * with it. So a plain ember process never loads libmpi: Open MPI's start-up, its memory
 * hooks and its fork warnings stay out of single-process runs, and a build without MPI
 * still has every other feature.
 *
 * CUDA tensors go to NCCL, which lives in the CUDA plugin (runtime/plugins/cuda/nccl_backend.c)
 * as an extra looked up by name (EM_CUDA_EXTRA_NCCL). The CPU backend still numbers the
 * ranks and carries everything else (control messages, the NCCL id of each group):
 *   'auto'  attaches NCCL to a group on its first CUDA collective (every rank makes that
 *           collective at the same point of its sequence, so connecting there is safe); a
 *           process that never reduces a CUDA tensor never loads the CUDA plugin for it. In a
 *           world of one process the self backend takes CUDA tensors too.
 *   'nccl'  requires NCCL and a GPU (a clear error otherwise), makes the local rank's GPU
 *           (local_rank mod the device count) the current device and connects the world's
 *           communicator during init.
 *   'mpi'   CPU tensors only: a CUDA collective is an error that says which backend to use.
 *   'gloo'  CPU collectives over Gloo's TCP transport (runtime/plugins/gloo, libember_gloo.so,
 *           loaded like the MPI plugin), for processes started torchrun-style (RANK,
 *           WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the real torchrun or by hand): what 'auto'
 *           and 'nccl' pick for such a start. Rendezvous in PyTorch's c10d TCPStore
 *           (torchrun's agent's, or one rank 0 hosts). CPU tensors only when named.
 *   'tcp', 'zmq'  the home-made ZeroMQ transport that 'gloo' replaced: an error naming 'gloo'.
 *
 * At exit (on_exit, which sees the exit status): status 0 finishes pending work and
 * finalizes MPI; any other status ends the whole job at once, because the other ranks may
 * be waiting in a collective for this one and MPI_Finalize would wait for them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda/cuda_plugin.h"
#include "distributed/dist_impl.h"
#include "tensor/tensor_impl.h"
#include "plugins/plugin_api.h"

#define DEFAULT_TIMEOUT_S 600.0

/* How CUDA tensors are reduced (see the top of the file). */
enum { CUDA_NONE = 0, CUDA_AUTO, CUDA_NCCL };

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static em_dist_group *world;
static const em_dist_backend *cpu_backend;
static int local_rank_value;
static int finalized_mpi; /* MPI cannot be initialised twice in one process */
static char init_name[16]; /* what init resolved the backend to: self, mpi or nccl */
static int cuda_mode;
static const em_dist_backend *cuda_backend; /* attached to groups on first use */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int exit_handler_set;
static atomic_int next_group_id = 1;

/* ---------------------------------------------------------------- launcher discovery */

static int env_int(const char *name, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1 << 30) return 0;
  *out = (int)x;
  return 1;
}

void em_dist_env_detect(em_dist_env *out) {
  em_dist_env e = {0, 1, 0, 1, "none"};
  int r, n;
  if (env_int("OMPI_COMM_WORLD_RANK", &r) && env_int("OMPI_COMM_WORLD_SIZE", &n)) {
    e.rank = r, e.world_size = n, e.launcher = "openmpi";
    env_int("OMPI_COMM_WORLD_LOCAL_RANK", &e.local_rank);
    env_int("OMPI_COMM_WORLD_LOCAL_SIZE", &e.local_size);
  } else if (env_int("PMI_RANK", &r) && env_int("PMI_SIZE", &n)) {
    e.rank = r, e.world_size = n, e.launcher = "pmi";
    env_int("MPI_LOCALRANKID", &e.local_rank);
    env_int("MPI_LOCALNRANKS", &e.local_size);
  } else if (env_int("SLURM_PROCID", &r) && (env_int("SLURM_STEP_NUM_TASKS", &n) || env_int("SLURM_NTASKS", &n))) {
    e.rank = r, e.world_size = n, e.launcher = "slurm";
    env_int("SLURM_LOCALID", &e.local_rank);
    /* "2(x3),1": tasks on this node lead the list only on the first node; a rough figure
     * is all the local size is used for (how many ranks share this machine's cores). */
    const char *t = getenv("SLURM_STEP_TASKS_PER_NODE");
    if (!t) t = getenv("SLURM_TASKS_PER_NODE");
    if (t) e.local_size = atoi(t) > 0 ? atoi(t) : 1;
  } else if (env_int("RANK", &r) && env_int("WORLD_SIZE", &n)) {
    e.rank = r, e.world_size = n, e.launcher = "torchrun";
    env_int("LOCAL_RANK", &e.local_rank);
    env_int("LOCAL_WORLD_SIZE", &e.local_size);
  }
  if (e.world_size < 1) e.world_size = 1;
  if (e.local_size < 1) e.local_size = 1;
  *out = e;
}

/* ---------------------------------------------------------------- the MPI and Gloo plugins */

/* libember_<name>.so (next to libember.so, or the path in EMBER_<NAME>_PLUGIN), its entry
 * point em_dist_<name>_backend and the layout handshake. title names it in messages,
 * install says what to build ember with when it is missing. */
static em_status load_plugin(const char *name, const char *title, const char *install, const em_dist_backend **out) {
  char path[4096], var[64], file[64], sym[64], upper[16];
  size_t i = 0;
  for (; name[i] && i < sizeof upper - 1; i++) upper[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
  upper[i] = 0;
  snprintf(var, sizeof var, "EMBER_%s_PLUGIN", upper);
  snprintf(file, sizeof file, "libember_%s.so", name);
  snprintf(sym, sizeof sym, "em_dist_%s_backend", name);
  const char *env = getenv(var);
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    /* next to libember.so (or the executable it is linked into) */
    Dl_info info;
    path[0] = 0;
    if (dladdr((void *)em_dist_init, &info) && info.dli_fname) {
      const char *slash = strrchr(info.dli_fname, '/');
      if (slash) snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, file);
    }
    if (!path[0]) snprintf(path, sizeof path, "%s", file);
  }
  /* RTLD_GLOBAL: Open MPI opens its own components later and they look for libmpi's
   * symbols in the global scope. */
  void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!h && !strchr(path, '/')) h = dlopen(file, RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char *why = dlerror();
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "dist.init: the %s backend is not available: cannot load %s (%s); build ember with %s or set "
                        "%s to %s",
                        title, path, why ? why : "unknown error", install, var, file);
  }
  em_dist_plugin_entry entry = (em_dist_plugin_entry)dlsym(h, sym);
  if (!entry) return em_set_error(EM_ERR_UNSUPPORTED, "dist.init: %s has no %s entry point", path, sym);
  const em_dist_plugin *p = entry();
  static const em_plugin_abi_item items[] = {EM_DIST_PLUGIN_ABI(EM_PLUGIN_ABI_ITEM)};
  static const em_plugin_abi abi = EM_PLUGIN_ABI_OF(items);
  char why[2048];
  /* Reading the handshake first is safe with any plugin: older ones returned the backend
   * itself, whose first member (its name pointer) never reads as EM_PLUGIN_HANDSHAKE. */
  if (!p || core_plugin_abi_check(path, &p->abi, &abi, why, sizeof why))
    return em_set_error(EM_ERR_UNSUPPORTED, "dist.init: the %s backend is not available: %s", title,
                        p ? why : "its entry point returned NULL");
  *out = p->backend;
  return EM_OK;
}

/* ---------------------------------------------------------------- the NCCL backend */

/* NCCL from the CUDA plugin, with the reason when there is none: no plugin, a plugin
 * built without NCCL, or no GPU. */
static em_status load_nccl(const char *op, const em_dist_backend **out) {
  const char *why = NULL;
  const em_cuda_plugin *p = cuda_plugin_get(&why);
  if (!p) return em_set_error(EM_ERR_UNSUPPORTED, "%s: backend 'nccl' is not available: %s", op, why);
  em_cuda_nccl_backend_fn nccl = (em_cuda_nccl_backend_fn)p->get_proc(EM_CUDA_EXTRA_NCCL);
  const em_dist_backend *be = nccl ? nccl() : NULL;
  if (!be)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "%s: backend 'nccl' is not available: the CUDA plugin was built without NCCL (install NCCL "
                        "where CMake finds it, e.g. /usr/local/cuda, and rebuild ember)",
                        op);
  why = NULL;
  if (p->device_count(&why) <= 0)
    return em_set_error(EM_ERR_DEVICE,
                        "%s: backend 'nccl' is not available: no CUDA device is available (%s); use backend 'mpi' or "
                        "'auto' for CPU tensors",
                        op, why && *why ? why : "none found");
  *out = be;
  return EM_OK;
}

const em_dist_backend *dist_group_backend(em_dist_group *g, em_device_type dev, void **impl, const char *op) {
  const em_dist_backend *be = g->backend[dev];
  if (be) {
    atomic_thread_fence(memory_order_acquire); /* pairs with the release below */
    *impl = g->impl[dev];
    return be;
  }
  if (!world) {
    em_set_error(EM_ERR_RUNTIME, "%s: the distributed world was finalized", op);
    return NULL;
  }
  if (dev != EM_CUDA || cuda_mode == CUDA_NONE) {
    em_set_error(EM_ERR_DEVICE,
                 "%s: %s has no backend for %s tensors: the world was initialised with backend '%s', which reduces "
                 "CPU tensors only (use dist.init{backend = 'nccl'} or 'auto' for CUDA tensors)",
                 op, g->name, dev == EM_CUDA ? "CUDA" : "CPU", init_name);
    return NULL;
  }
  pthread_mutex_lock(&attach_lock);
  em_status st = EM_OK;
  if (!g->backend[dev]) {
    if (!cuda_backend) st = load_nccl(op, &cuda_backend);
    void *state = NULL;
    if (!st && cuda_backend->attach) st = cuda_backend->attach(g, &state);
    if (!st) {
      g->impl[dev] = state;
      atomic_thread_fence(memory_order_release); /* readers that see the backend see its state */
      g->backend[dev] = cuda_backend;
    }
  }
  pthread_mutex_unlock(&attach_lock);
  if (st) return NULL;
  *impl = g->impl[dev];
  return g->backend[dev];
}

const char *em_dist_device_backend_name(int device_type) {
  if (!world || device_type < 0 || device_type >= EM_NUM_DEVICE_TYPES) return NULL;
  const em_dist_backend *be = world->backend[device_type];
  if (be) return be->name;
  return device_type == EM_CUDA && cuda_mode == CUDA_AUTO ? "nccl" : NULL;
}

/* dist.init{backend = 'nccl'}: the local rank's GPU becomes current, and the world's
 * communicator connects now (a one-element all_reduce), so that a setup problem shows here
 * and not in the middle of the first backward. */
static em_status connect_world_nccl(int local_rank) {
  int n = em_cuda_device_count();
  em_status st = n > 0 ? em_cuda_set_device(local_rank % n) : EM_OK;
  em_tensor *t = NULL;
  int64_t one = 1;
  if (!st) st = em_zeros(&t, 1, &one, EM_FLOAT32, (em_device){EM_CUDA, n > 0 ? local_rank % n : 0});
  if (!st) st = em_dist_all_reduce(world, t, EM_DIST_SUM, NULL);
  em_tensor_release(t);
  if (st)
    return em_set_error(st, "dist.init: connecting NCCL (local rank %d, cuda:%d): %s", local_rank,
                        n > 0 ? local_rank % n : 0, em_last_error());
  return EM_OK;
}

/* ---------------------------------------------------------------- init / finalize */

static void shutdown_world(int exit_status) {
  pthread_mutex_lock(&init_lock);
  em_dist_group *w = world;
  const em_dist_backend *be = cpu_backend, *dev_be = cuda_backend;
  world = NULL;
  cpu_backend = NULL;
  cuda_mode = CUDA_NONE;
  pthread_mutex_unlock(&init_lock);
  if (!w) return;
  /* GPU work first: it may still need the CPU backend (a group's NCCL id) */
  if (dev_be && dev_be != be && dev_be != dist_self_backend()) dev_be->shutdown(exit_status);
  if (be) {
    if (!strcmp(be->name, "mpi")) finalized_mpi = 1;
    be->shutdown(exit_status);
  }
  /* Groups still referenced by Lua objects stay valid as handles; their backend state is
   * gone (collectives on them report that the world was finalized). */
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++) w->backend[d] = NULL;
  em_dist_group_release(w);
}

static void exit_handler(int status, void *arg) {
  (void)arg;
  shutdown_world(status);
}

/* The CPU backend (*chosen: self, mpi or gloo), how CUDA tensors are reduced (*mode) and the
 * name init reports (*resolved). */
static em_status choose_backend(const char *name, const em_dist_env *env, const char **chosen, int *mode,
                                const char **resolved) {
  int is_auto = !name || !*name || !strcmp(name, "auto"), is_nccl = name && !strcmp(name, "nccl");
  int torchrun = !strcmp(env->launcher, "torchrun");
  if (is_auto || is_nccl) {
    /* torchrun-style (RANK/WORLD_SIZE, no MPI launcher): Gloo, with the rendezvous in the
     * c10d store at MASTER_ADDR:MASTER_PORT (torchrun's own, or one rank 0 hosts); NCCL's
     * id then travels over Gloo. */
    *chosen = torchrun ? "gloo" : strcmp(env->launcher, "none") ? "mpi" : "self";
    *mode = is_nccl ? CUDA_NCCL : CUDA_AUTO;
    *resolved = is_nccl ? "nccl" : *chosen;
    return EM_OK;
  }
  if (!strcmp(name, "tcp") || !strcmp(name, "zmq"))
    return em_set_error(EM_ERR_ARGUMENT,
                        "dist.init: backend '%s' is gone: torchrun-style starts (RANK, WORLD_SIZE, MASTER_ADDR, "
                        "MASTER_PORT) run on 'gloo' now (also what 'auto' picks there)",
                        name);
  if (!strcmp(name, "mpi") || !strcmp(name, "self") || !strcmp(name, "gloo")) {
    if (!strcmp(name, "self") && env->world_size > 1)
      return em_set_error(EM_ERR_ARGUMENT,
                          "dist.init: backend 'self' runs a world of one process, but the launcher (%s) started %d",
                          env->launcher, env->world_size);
    *chosen = *resolved = name;
    *mode = !strcmp(name, "self") ? CUDA_AUTO : CUDA_NONE;
    return EM_OK;
  }
  return em_set_error(EM_ERR_ARGUMENT, "dist.init: unknown backend '%s' (expected auto, mpi, gloo, self or nccl)", name);
}

em_status em_dist_init(const char *backend, double timeout_s) {
  em_dist_env env;
  em_dist_env_detect(&env);
  const char *chosen = NULL, *resolved = NULL;
  int mode = CUDA_NONE;
  em_status st = choose_backend(backend, &env, &chosen, &mode, &resolved);
  if (st) return st;
  const em_dist_backend *nccl = NULL;
  if (mode == CUDA_NCCL && (st = load_nccl("dist.init", &nccl))) return st; /* before MPI starts */
  if (timeout_s <= 0) {
    const char *t = getenv("EMBER_DIST_TIMEOUT");
    char *end = NULL;
    double v = t ? strtod(t, &end) : 0;
    timeout_s = (t && end && !*end && v > 0) ? v : DEFAULT_TIMEOUT_S;
  }
  pthread_mutex_lock(&init_lock);
  if (world) {
    int same = !strcmp(init_name, resolved);
    pthread_mutex_unlock(&init_lock);
    if (same || !backend || !strcmp(backend, "auto")) return EM_OK; /* already initialised */
    return em_set_error(EM_ERR_ARGUMENT, "dist.init: already initialised with backend '%s', cannot switch to '%s'",
                        init_name, resolved);
  }
  const em_dist_backend *be = NULL;
  if (!strcmp(chosen, "self")) {
    be = dist_self_backend();
  } else {
    if (finalized_mpi && !strcmp(chosen, "mpi")) {
      pthread_mutex_unlock(&init_lock);
      return em_set_error(EM_ERR_RUNTIME, "dist.init: MPI was finalized in this process and cannot start again");
    }
    int gloo = !strcmp(chosen, "gloo");
    if ((st = load_plugin(chosen, gloo ? "Gloo" : "MPI", gloo ? "Gloo (libgloo-dev)" : "Open MPI (libopenmpi-dev)", &be))) {
      pthread_mutex_unlock(&init_lock);
      return st;
    }
  }
  em_dist_group *g = calloc(1, sizeof *g);
  void *impl = NULL;
  int rank = 0, size = 1, local = 0;
  if (!g) st = em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  if (!st) st = be->init(timeout_s, &rank, &size, &local, &impl);
  if (!st && !(g->world_ranks = malloc(sizeof(int) * size)))
    st = em_set_error(EM_ERR_MEMORY, "dist.init: out of memory");
  if (st) {
    free(g);
    pthread_mutex_unlock(&init_lock);
    return st;
  }
  atomic_init(&g->refcount, 1);
  g->id = 0;
  g->rank = rank;
  g->size = size;
  for (int i = 0; i < size; i++) g->world_ranks[i] = i;
  g->timeout = timeout_s;
  g->backend[EM_CPU] = be;
  g->impl[EM_CPU] = impl;
  /* a world of one: CUDA tensors need no communicator either */
  if (be == dist_self_backend() && mode == CUDA_AUTO) g->backend[EM_CUDA] = be;
  snprintf(g->name, sizeof g->name, "the world group");
  world = g;
  cpu_backend = be;
  cuda_mode = mode;
  if (nccl) cuda_backend = nccl;
  snprintf(init_name, sizeof init_name, "%s", resolved);
  local_rank_value = local;
  if (!exit_handler_set) {
    on_exit(exit_handler, NULL);
    exit_handler_set = 1;
  }
  pthread_mutex_unlock(&init_lock);
  return mode == CUDA_NCCL ? connect_world_nccl(local) : EM_OK;
}

int em_dist_is_initialized(void) { return world != NULL; }
const char *em_dist_backend_name(void) { return cpu_backend ? cpu_backend->name : NULL; }
em_dist_group *em_dist_world(void) { return world; }
em_dist_group *emp_dist_world_group(void) { return world; }
int em_dist_local_rank(void) { return world ? local_rank_value : 0; }

em_status em_dist_finalize(void) {
  if (!world) return EM_OK;
  shutdown_world(0);
  return EM_OK;
}

/* ---------------------------------------------------------------- groups */

em_status em_dist_new_group(em_dist_group **out, em_dist_group *parent, int n, const int *ranks) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "new_group: out is NULL");
  *out = NULL;
  if (!parent) parent = world;
  if (!parent) return em_set_error(EM_ERR_RUNTIME, "new_group: call dist.init first");
  if (parent->rank < 0)
    return em_set_error(EM_ERR_ARGUMENT, "new_group: this rank is not a member of the parent group");
  if (n < 1 || !ranks) return em_set_error(EM_ERR_ARGUMENT, "new_group: expected at least one rank, got %d", n);
  if (n > parent->size)
    return em_set_error(EM_ERR_ARGUMENT, "new_group: %d ranks listed, the parent group has %d", n, parent->size);
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= parent->size)
      return em_set_error(EM_ERR_INDEX, "new_group: rank %d out of range for a group of %d (ranks count from 0)",
                          ranks[i], parent->size);
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i]) return em_set_error(EM_ERR_ARGUMENT, "new_group: rank %d listed twice", ranks[i]);
  }
  em_dist_group *g = calloc(1, sizeof *g);
  if (!g || !(g->world_ranks = malloc(sizeof(int) * n))) {
    free(g);
    return em_set_error(EM_ERR_MEMORY, "new_group: out of memory");
  }
  atomic_init(&g->refcount, 1);
  g->id = atomic_fetch_add(&next_group_id, 1); /* every rank creates groups in the same order */
  g->size = n;
  g->rank = -1;
  g->timeout = parent->timeout;
  for (int i = 0; i < n; i++) g->world_ranks[i] = parent->world_ranks[ranks[i]];
  snprintf(g->name, sizeof g->name, "group %d", g->id);
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++) {
    const em_dist_backend *be = parent->backend[d];
    if (!be || !be->new_group) continue; /* device backends attach on first use */
    int r = -1;
    em_status st = be->new_group(parent->impl[d], g->id, n, ranks, &g->impl[d], &r);
    if (st) {
      g->backend[d] = NULL;
      em_dist_group_release(g);
      return st;
    }
    g->backend[d] = be;
    g->rank = r;
  }
  *out = g;
  return EM_OK;
}

void em_dist_group_retain(em_dist_group *g) {
  if (g) atomic_fetch_add(&g->refcount, 1);
}

void em_dist_group_release(em_dist_group *g) {
  if (!g || atomic_fetch_sub(&g->refcount, 1) != 1) return;
  dist_symm_release(g->symm);
  dist_hier_free(g->hier);
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++)
    if (g->backend[d] && g->impl[d] && g->id != 0) g->backend[d]->free_group(g->impl[d]);
  free(g->world_ranks);
  free(g);
}

int em_dist_rank(const em_dist_group *g) { return g ? g->rank : -1; }
int em_dist_size(const em_dist_group *g) { return g ? g->size : 0; }
int em_dist_world_rank_of(const em_dist_group *g, int rank) {
  return g && rank >= 0 && rank < g->size ? g->world_ranks[rank] : -1;
}
double em_dist_timeout(const em_dist_group *g) { return g ? g->timeout : 0; }

em_status em_dist_set_timeout(em_dist_group *g, double timeout_s) {
  if (!g) return em_set_error(EM_ERR_ARGUMENT, "set_timeout: no group");
  if (!(timeout_s > 0))
    return em_set_error(EM_ERR_ARGUMENT, "set_timeout: expected a timeout > 0 seconds, got %g", timeout_s);
  g->timeout = timeout_s;
  return EM_OK;
}
