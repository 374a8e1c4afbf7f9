/* random.c - the global Philox generator state and the random fills.
 *
 * The state is (seed, offset): the seed keys Philox, the offset is the first counter
 * block of the next fill. Every fill reserves EM_PHILOX_BLOCKS(numel) blocks, a number
 * that depends only on the element count, so that a result never depends on the thread
 * count and two calls never share numbers. The backend generates element i (in logical,
 * row-major order) from block offset + i / 2 (see core/philox.h). */
#include <math.h>
#include <pthread.h>
#include "backend.h"
#include "core/philox.h"

/* PyTorch's default seed: a fixed one makes unseeded runs reproducible too. */
#define EM_DEFAULT_SEED 67280421310721ull

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t state_seed = EM_DEFAULT_SEED;
static uint64_t state_offset;

void em_manual_seed(uint64_t seed) { em_generator_set_state(seed, 0); }

void em_generator_get_state(uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&state_lock);
  if (seed) *seed = state_seed;
  if (offset) *offset = state_offset;
  pthread_mutex_unlock(&state_lock);
}

void em_generator_set_state(uint64_t seed, uint64_t offset) {
  pthread_mutex_lock(&state_lock);
  state_seed = seed;
  state_offset = offset;
  pthread_mutex_unlock(&state_lock);
}

void em_generator_skip(int64_t numel) {
  pthread_mutex_lock(&state_lock);
  if (numel > 0) state_offset += EM_PHILOX_BLOCKS(numel);
  pthread_mutex_unlock(&state_lock);
}

/* Reserves the blocks for n elements; returns the seed and first block. */
static void reserve(int64_t n, uint64_t *seed, uint64_t *offset) {
  pthread_mutex_lock(&state_lock);
  *seed = state_seed;
  *offset = state_offset;
  state_offset += EM_PHILOX_BLOCKS(n);
  pthread_mutex_unlock(&state_lock);
}

static em_status check_target(const char *op, const em_tensor *t, int floats_only) {
  em_status st = tn_check_tensor(op, t, "tensor");
  if (st || (st = tn_check_inplace(op, t, NULL))) return st;
  if (t->dtype == EM_FLOAT16 || t->dtype == EM_BFLOAT16)
    return em_set_error(EM_ERR_DTYPE, "%s: dtype %s is storage-only; fill a float32 tensor and convert with to('%s')",
                        op, em_dtype_name(t->dtype), em_dtype_name(t->dtype));
  if (floats_only && !em_dtype_is_floating(t->dtype))
    return em_set_error(EM_ERR_DTYPE, "%s: expected a float32 or float64 tensor, got %s", op, em_dtype_name(t->dtype));
  return EM_OK;
}

/* Reserves counters and runs the backend fill. */
static em_status run_fill(const char *op, em_tensor *t, em_random_params *p) {
  const em_backend *be = tn_backend_for(op, t->storage->device);
  if (!be) return em_last_status();
  int64_t n = em_tensor_numel(t);
  if (n == 0) return EM_OK;
  reserve(n, &p->seed, &p->offset);
  return be->random(t, p);
}

em_status em_uniform_(em_tensor *t, double low, double high) {
  em_status st = check_target("uniform_", t, 1);
  if (st) return st;
  if (!isfinite(low) || !isfinite(high) || low > high)
    return em_set_error(EM_ERR_ARGUMENT, "uniform_: got low=%g high=%g, expected finite values with low <= high", low,
                        high);
  em_random_params p = {.kind = EM_RANDOM_UNIFORM, .a = low, .b = high};
  return run_fill("uniform_", t, &p);
}

em_status em_normal_(em_tensor *t, double mean, double std) {
  em_status st = check_target("normal_", t, 1);
  if (st) return st;
  if (!isfinite(mean) || !isfinite(std) || std < 0)
    return em_set_error(EM_ERR_ARGUMENT, "normal_: got mean=%g std=%g, expected finite values with std >= 0", mean,
                        std);
  em_random_params p = {.kind = EM_RANDOM_NORMAL, .a = mean, .b = std};
  return run_fill("normal_", t, &p);
}

em_status em_bernoulli_(em_tensor *t, double prob) {
  em_status st = check_target("bernoulli_", t, 0);
  if (st) return st;
  if (!(prob >= 0 && prob <= 1)) /* also rejects NaN */
    return em_set_error(EM_ERR_ARGUMENT, "bernoulli_: got p=%g, expected a probability in [0, 1]", prob);
  em_random_params p = {.kind = EM_RANDOM_BERNOULLI, .a = prob};
  return run_fill("bernoulli_", t, &p);
}

/* The integers a dtype holds exactly: [*lo, *hi]. */
static void exact_range(em_dtype dtype, int64_t *lo, int64_t *hi) {
  switch (dtype) {
    case EM_BOOL: *lo = 0, *hi = 1; break;
    case EM_UINT8: *lo = 0, *hi = 255; break;
    case EM_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case EM_FLOAT32: *lo = -(1ll << 24), *hi = 1ll << 24; break;
    case EM_FLOAT64: *lo = -(1ll << 53), *hi = 1ll << 53; break;
    default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

em_status em_randint_(em_tensor *t, int64_t low, int64_t high) {
  em_status st = check_target("randint_", t, 0);
  if (st) return st;
  if (high <= low)
    return em_set_error(EM_ERR_ARGUMENT,
                        "randint_: got low=%lld high=%lld, expected low < high (the range is [low, high))",
                        (long long)low, (long long)high);
  int64_t lo, hi;
  exact_range(t->dtype, &lo, &hi);
  if (low < lo || high - 1 > hi)
    return em_set_error(EM_ERR_ARGUMENT,
                        "randint_: the range [%lld, %lld) does not fit dtype %s (which holds %lld..%lld exactly)",
                        (long long)low, (long long)high, em_dtype_name(t->dtype), (long long)lo, (long long)hi);
  em_random_params p = {.kind = EM_RANDOM_INT, .low = low, .high = high};
  return run_fill("randint_", t, &p);
}

em_status em_randperm(em_tensor **out, int64_t n, em_dtype dtype, em_device device) {
  if (!out) return em_set_error(EM_ERR_ARGUMENT, "randperm: out must not be NULL");
  if (n < 0) return em_set_error(EM_ERR_ARGUMENT, "randperm: n is %lld, expected n >= 0", (long long)n);
  if (dtype != EM_INT64 && dtype != EM_INT32 && dtype != EM_FLOAT32 && dtype != EM_FLOAT64)
    return em_set_error(EM_ERR_DTYPE, "randperm: expected dtype int64, int32, float32 or float64, got %s",
                        em_dtype_name(dtype));
  int64_t lo, hi;
  exact_range(dtype, &lo, &hi);
  if (n > 0 && n - 1 > hi)
    return em_set_error(EM_ERR_ARGUMENT, "randperm: n = %lld does not fit dtype %s (largest exact value %lld)",
                        (long long)n, em_dtype_name(dtype), (long long)hi);
  bool allocated;
  em_status st = tn_prepare_out("randperm", out, 1, &n, dtype, device, &allocated);
  if (st) return st;
  em_random_params p = {.kind = EM_RANDOM_PERM};
  if ((st = run_fill("randperm", *out, &p))) tn_discard_out(out, allocated);
  return st;
}
