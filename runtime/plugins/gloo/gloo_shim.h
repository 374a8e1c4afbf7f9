/* gloo_shim.h - Gloo (a C++ library) behind a C interface: the only C++ of the Gloo backend
 * (gloo_shim.cpp). Everything else of libember_gloo.so is C and sees only these functions.
 *
 * Every call catches what Gloo throws and returns a status: GLX_OK, GLX_TIMEOUT (the
 * operation did not complete in time), GLX_IO (a connection failed: a peer died or closed)
 * or GLX_ERROR (anything else); err receives Gloo's message. After GLX_TIMEOUT or GLX_IO a
 * context is unusable (Gloo has failed its pairs): the backend ends the job. */
#ifndef EMBER_GLOO_SHIM_H
#define EMBER_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "ember/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GLX_OK = 0, GLX_TIMEOUT, GLX_IO, GLX_ERROR };

typedef struct glx_device glx_device;
typedef struct glx_context glx_context;
typedef struct glx_p2p glx_p2p;

/* out[i] = a[i] (op) b[i] for n elements; out may be a or b. */
typedef void (*glx_reduce_fn)(void *out, const void *a, const void *b, size_t n, void *arg);

/* A TCP device on the interface named iface (GLOO_SOCKET_IFNAME) or else the address
 * hostname (the one this host reaches MASTER_ADDR from). */
int glx_device_new(const char *hostname, const char *iface, glx_device **out, char *err, size_t cap);
void glx_device_free(glx_device *d);

/* Connects rank of size through store (keys under prefix): every member calls it. */
int glx_context_connect(glx_device *d, em_dist_store *store, const char *prefix, int rank, int size,
                        double timeout_s, glx_context **out, char *err, size_t cap);
void glx_context_free(glx_context *c);

/* Collectives; esize is the element size in bytes (1, 2, 4 or 8), counts are elements.
 * timeout_s bounds the whole operation. */
typedef struct glx_op {
  double timeout_s;
  uint32_t tag;
  char *err;
  size_t cap;
} glx_op;
int glx_allreduce(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, glx_reduce_fn fn, void *arg);
int glx_reduce(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, int root, glx_reduce_fn fn,
               void *arg);
int glx_broadcast(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, int root);
int glx_allgather(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize);
int glx_allgatherv(glx_context *c, const glx_op *o, const void *in, void *out, const int64_t *counts, size_t esize);
int glx_alltoall(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize);
int glx_alltoallv(glx_context *c, const glx_op *o, const void *in, const int64_t *in_counts, void *out,
                  const int64_t *out_counts, size_t esize);
int glx_gather(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize, int root);
int glx_scatter(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize, int root);
int glx_barrier(glx_context *c, const glx_op *o);

/* Point to point: starts a send (or receive) of bytes at ptr to (from) peer on slot;
 * wait completes it. A started operation is waited for and freed exactly once. */
int glx_p2p_start(glx_context *c, void *ptr, size_t bytes, int send, int peer, uint64_t slot, glx_p2p **out,
                  char *err, size_t cap);
int glx_p2p_wait(glx_p2p *p, double timeout_s, char *err, size_t cap);
void glx_p2p_free(glx_p2p *p);

#ifdef __cplusplus
}
#endif
#endif
