/* ember/core.h - errors, dtypes, devices, threads, memory accounting, a monotonic clock and
 * atomic file replacement.
 *
 * Every function that can fail returns an em_status; on failure the message is kept
 * thread-locally and read with em_last_error(). Messages name the operation, what it was
 * given and what it expected, e.g. "add: shapes [2, 3] and [4] cannot be broadcast".
 *
 * Lines between EM_FFI_BEGIN and EM_FFI_END are turned into LuaJIT FFI declarations by
 * bindings/ffi/gen_cdefs.lua, so they must stay plain C declarations: the one macro in them
 * is EM_API, which gen_cdefs.lua strips. */
#ifndef EMBER_CORE_H
#define EMBER_CORE_H

#include <stddef.h>
#include <stdint.h>

/* EM_API marks every function of the public API. libember is built with hidden visibility,
 * so its dynamic symbol table holds exactly these, plus the plugin-facing EM_PLUGIN_API
 * functions of runtime/plugins/plugin_api.h (tests/api/check_exports.lua keeps it so). */
#if defined(__GNUC__) || defined(__clang__)
#define EM_API __attribute__((visibility("default")))
#else
#define EM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* EM_FFI_BEGIN */
typedef enum em_status {
  EM_OK = 0,
  EM_ERR_ARGUMENT, /* a bad argument value (negative size, unknown option) */
  EM_ERR_SHAPE, /* shapes that do not fit together */
  EM_ERR_DTYPE, /* a dtype the operation does not take */
  EM_ERR_INDEX, /* an index out of range */
  EM_ERR_MEMORY, /* allocation failed */
  EM_ERR_IO, /* a file could not be opened, read or written */
  EM_ERR_FORMAT, /* a file's contents are malformed */
  EM_ERR_DEVICE, /* a device that is absent or a cross-device mix */
  EM_ERR_UNSUPPORTED, /* valid, but not built or not implemented for this dtype/device */
  EM_ERR_RUNTIME /* anything else */
} em_status;

typedef enum em_dtype {
  EM_FLOAT32 = 0,
  EM_FLOAT64,
  EM_FLOAT16, /* storage and conversion only */
  EM_BFLOAT16, /* storage and conversion only */
  EM_INT32,
  EM_INT64,
  EM_UINT8,
  EM_BOOL, /* one byte, 0 or 1 */
  EM_NUM_DTYPES
} em_dtype;

typedef enum em_device_type { EM_CPU = 0, EM_CUDA = 1, EM_NUM_DEVICE_TYPES } em_device_type;

typedef struct em_device {
  int32_t type; /* em_device_type */
  int32_t index; /* device ordinal; 0 for the CPU */
} em_device;

/* Errors (thread-local). */
EM_API const char *em_last_error(void);
EM_API em_status em_last_status(void);
EM_API void em_clear_error(void);
EM_API em_status em_set_error(em_status code, const char *fmt, ...);

/* dtypes */
EM_API const char *em_dtype_name(em_dtype dtype); /* "float32" ... */
EM_API em_status em_dtype_from_name(const char *name, em_dtype *out);
EM_API size_t em_dtype_size(em_dtype dtype); /* bytes per element */
EM_API int em_dtype_is_floating(em_dtype dtype);
EM_API em_dtype em_dtype_promote(em_dtype a, em_dtype b); /* PyTorch-style promotion */

/* devices */
EM_API em_status em_device_parse(const char *name, em_device *out); /* "cpu", "cuda", "cuda:1" */
EM_API int em_device_count(em_device_type type); /* 0 when the backend is absent */
EM_API int em_device_available(em_device device);

/* Threads: one knob for ember's OpenMP loops and OpenBLAS. */
EM_API void em_set_num_threads(int n);
EM_API int em_get_num_threads(void);

/* Seconds on the monotonic clock (never jumps with the wall clock): for timing and
 * timeouts. */
EM_API double em_clock_monotonic(void);

/* Replaces the file at path with n bytes, atomically: readers see the old file or the new
 * one, and after a crash one of the two is on disk (a temporary file beside it, fsync'ed
 * and renamed over it; the folder fsync'ed). */
EM_API em_status em_file_replace(const char *path, const void *data, size_t n);

/* Memory accounting over every storage on every device (bytes). */
EM_API int64_t em_memory_allocated(void);
EM_API int64_t em_memory_peak(void);
EM_API void em_memory_reset_peak(void);

/* Build information. */
EM_API const char *em_version(void);
EM_API const char *em_build_features(void); /* space separated, e.g. "openblas openmp yaml" */
EM_API const char *em_blas_config(void);
/* oneDNN, which runs CPU convolutions where it measured faster and bfloat16 autocast on
 * the CPU: its version, threading and mode (EMBER_DNNL), or why it is not used. */
EM_API const char *em_dnnl_config(void);
/* The name of the kernels OpenBLAS runs ("SkylakeX", "Haswell", ...). */
EM_API const char *em_blas_corename(void);
/* A known-answer check of every BLAS routine and layout ember calls (s/dgemm in the four
 * transpose pairs, on shapes that cross kernel block edges and the threaded path; sgemv
 * both ways; sdot) against a float64 reference: 1 when right, else 0 with why (cap bytes)
 * naming the routine, the shape and the first wrong element. Takes tens of milliseconds. */
EM_API int em_blas_verify(char *why, size_t cap);
/* EM_FFI_END */

#ifdef __cplusplus
}
#endif
#endif
