/* backend.c - the CPU backend's dispatch table and host allocator. */
#include <stdlib.h>
#include "cpu_impl.h"

void *em_cpu_alloc(size_t nbytes, em_device device) {
  (void)device;
  size_t rounded = (nbytes + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
  return aligned_alloc(64, rounded);
}

void em_cpu_free(void *ptr, size_t nbytes, em_device device) {
  (void)nbytes, (void)device;
  free(ptr);
}

/* Entries left out (NULL) are reported as unsupported by the tensor core. Each kernel
 * group lives in its own file; the functions are declared in cpu_impl.h. */
const em_backend em_cpu_backend = {
    .name = "cpu",
    .alloc = em_cpu_alloc,
    .free = em_cpu_free,
    .copy = em_cpu_copy,
    .fill = em_cpu_fill,
    .arange = em_cpu_arange,
};
