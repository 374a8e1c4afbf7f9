/* autocast.c - the thread-local autocast state (ember/autograd.h) and its cast policy
 * (autocast.h), after torch.autocast. */
#include "autocast.h"
#include "cpu/cpu_dnnl.h"

typedef struct autocast_state {
  int any; /* on for some device type: the ops' fast check */
  unsigned char on[EM_NUM_DEVICE_TYPES];
  unsigned char dtype_set[EM_NUM_DEVICE_TYPES];
  em_dtype dtype[EM_NUM_DEVICE_TYPES];
} autocast_state;

static _Thread_local autocast_state state;
/* bfloat16 math for the CPU's GEMMs and convolutions in a backward pass: set by the engine
 * around the backward of a node recorded under CPU autocast */
static _Thread_local int cpu_bf16_backward;

static int valid_type(int device_type) { return device_type >= 0 && device_type < EM_NUM_DEVICE_TYPES; }

static void store(int device_type, int enabled, em_dtype dtype) {
  state.on[device_type] = enabled != 0;
  if (dtype == EM_FLOAT16 || dtype == EM_BFLOAT16) {
    state.dtype[device_type] = dtype;
    state.dtype_set[device_type] = 1;
  }
  state.any = 0;
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++) state.any |= state.on[d];
}

em_status em_autocast_set(em_device_type device_type, int enabled, em_dtype dtype) {
  if (!valid_type(device_type))
    return em_set_error(EM_ERR_DEVICE, "autocast: unknown device type %d", (int)device_type);
  if (enabled && dtype != EM_FLOAT16 && dtype != EM_BFLOAT16)
    return em_set_error(EM_ERR_DTYPE, "autocast: dtype %s is not a lower precision; expected float16 or bfloat16",
                        em_dtype_name(dtype));
  /* On the CPU, bfloat16 is computed by oneDNN only (the tensors stay float32: the GEMM and
   * convolution kernels round their operands and sum in float32); float16 not at all.
   * Refused rather than run silently in float32. */
  if (enabled && device_type == EM_CPU && dtype != EM_BFLOAT16)
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "autocast: dtype %s on cpu is not supported (the CPU backend computes bfloat16 only); use "
                        "dtype 'bfloat16'",
                        em_dtype_name(dtype));
  if (enabled && device_type == EM_CPU && !cpu_dnnl_available())
    return em_set_error(EM_ERR_UNSUPPORTED,
                        "autocast: bfloat16 on cpu needs oneDNN, and this libember was built without it (install "
                        "libdnnl-dev and rebuild) or EMBER_DNNL=0 turned it off");
  store(device_type, enabled, dtype);
  return EM_OK;
}

void ag_autocast_force_(int device_type, int enabled, em_dtype dtype) {
  if (valid_type(device_type)) store(device_type, enabled, dtype);
}

int em_autocast_is_enabled(int device_type) {
  if (device_type < 0) return state.any;
  return valid_type(device_type) && state.on[device_type];
}

em_dtype em_autocast_get_dtype(em_device_type device_type) {
  if (valid_type(device_type) && state.dtype_set[device_type]) return state.dtype[device_type];
  return device_type == EM_CUDA ? EM_FLOAT16 : EM_BFLOAT16; /* torch.autocast's defaults */
}

em_dtype ag_autocast_target(em_autocast_policy policy, int device_type, em_dtype dtype) {
  if (!state.any || !valid_type(device_type) || !state.on[device_type]) return dtype;
  int lower = dtype == EM_FLOAT16 || dtype == EM_BFLOAT16;
  if (policy == EM_AUTOCAST_FP32) return lower ? EM_FLOAT32 : dtype;
  /* the CPU's bfloat16 lives inside its kernels (ag_autocast_cpu_bf16): no casts (float16,
   * which only ag_autocast_force_ can set there, casts and then fails as it would) */
  if (device_type == EM_CPU && em_autocast_get_dtype(EM_CPU) == EM_BFLOAT16) return dtype;
  /* float64 stays: asking for it is asking for precision (torch.autocast does the same) */
  return lower || dtype == EM_FLOAT32 ? em_autocast_get_dtype(device_type) : dtype;
}

int ag_autocast_prepare(em_autocast_ops *ops, em_autocast_policy policy, int n, const em_tensor *const *in) {
  if (!state.any) return 0;
  em_dtype want[EM_AUTOCAST_MAX_OPERANDS];
  int changes = 0;
  if (n > EM_AUTOCAST_MAX_OPERANDS) n = EM_AUTOCAST_MAX_OPERANDS;
  for (int k = 0; k < n; k++) {
    const em_tensor *t = in[k];
    /* freed or NULL operands are the op's to report */
    want[k] = t && !t->freed && em_dtype_is_floating(t->dtype)
                  ? ag_autocast_target(policy, t->storage->device.type, t->dtype)
                  : (t && !t->freed ? t->dtype : EM_FLOAT32);
    changes |= t && !t->freed && want[k] != t->dtype;
  }
  if (!changes) return 0;
  ops->n = n;
  ops->status = EM_OK;
  for (int k = 0; k < n; k++) {
    ops->cast[k] = NULL;
    ops->t[k] = in[k];
  }
  for (int k = 0; k < n && !ops->status; k++) {
    const em_tensor *t = in[k];
    if (!t || t->freed || want[k] == t->dtype) continue;
    ops->status = em_ag_to(&ops->cast[k], t, want[k], t->storage->device);
    ops->t[k] = ops->cast[k];
  }
  return 1;
}

em_status ag_autocast_finish(em_autocast_ops *ops, em_status st) {
  for (int k = 0; k < ops->n; k++) em_tensor_release(ops->cast[k]);
  return st;
}

int ag_autocast_cpu_bf16(void) {
  return cpu_bf16_backward || (state.on[EM_CPU] && em_autocast_get_dtype(EM_CPU) == EM_BFLOAT16);
}

int ag_autocast_cpu_bf16_backward(int on) {
  int was = cpu_bf16_backward;
  cpu_bf16_backward = on;
  return was;
}

em_autocast_saved ag_autocast_suspend(void) {
  em_autocast_saved saved;
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++) {
    saved.on[d] = state.on[d];
    state.on[d] = 0;
  }
  state.any = 0;
  return saved;
}

void ag_autocast_resume(em_autocast_saved saved) {
  state.any = 0;
  for (int d = 0; d < EM_NUM_DEVICE_TYPES; d++) {
    state.on[d] = saved.on[d];
    state.any |= saved.on[d];
  }
}
