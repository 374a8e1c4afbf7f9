// gloo_shim.cpp - the C interface of gloo_shim.h over Gloo's C++ API: the TCP device, a
// rendezvous store backed by ember's c10d TCPStore client, full-mesh contexts, the
// collectives (gloo::allreduce, reduce, broadcast, allgather(v), alltoall(v), gather,
// scatter, barrier) and unbound-buffer send/recv. Gloo's typed setters only use the type
// for its size, so each element size maps to an unsigned integer type of that size; the
// reductions are ember's (a C callback per dtype and operation).
#include "gloo_shim.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

struct glx_device {
  std::shared_ptr<gloo::transport::Device> dev;
};
struct glx_context {
  std::shared_ptr<gloo::Context> ctx;
};
struct glx_p2p {
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  int send;
};

namespace {

// Gloo's rendezvous keys in ember's store, under a prefix of their own per group.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(em_dist_store *s, std::string prefix, double timeout) : s_(s), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    if (em_dist_store_set(s_, (prefix_ + key).c_str(), data.data(), data.size())) throw std::runtime_error(em_last_error());
  }

  std::vector<char> get(const std::string &key) override {
    std::vector<char> v(4096);
    size_t len = 0;
    if (em_dist_store_get(s_, (prefix_ + key).c_str(), v.data(), v.size(), &len)) throw std::runtime_error(em_last_error());
    if (len > v.size()) {
      v.resize(len);
      if (em_dist_store_get(s_, (prefix_ + key).c_str(), v.data(), v.size(), &len)) throw std::runtime_error(em_last_error());
    }
    v.resize(len);
    return v;
  }

  void wait(const std::vector<std::string> &keys) override { wait(keys, std::chrono::milliseconds((long)(timeout_ * 1000))); }

  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
    std::vector<std::string> full;
    std::vector<const char *> ptrs;
    for (const auto &k : keys) full.push_back(prefix_ + k);
    for (const auto &k : full) ptrs.push_back(k.c_str());
    if (ptrs.empty()) return;
    if (em_dist_store_wait(s_, (int)ptrs.size(), ptrs.data(), timeout.count() / 1000.0))
      throw std::runtime_error(em_last_error());
  }

 private:
  em_dist_store *s_;
  std::string prefix_;
  double timeout_;
};

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(s > 0.001 ? (long long)(s * 1000) : 1); }

int fail(char *err, size_t cap, int code, const char *what) {
  if (err && cap) snprintf(err, cap, "%s", what);
  return code;
}

// Gloo reports a timeout as an IoException whose text says so.
template <typename F>
int guarded(char *err, size_t cap, F &&f) {
  try {
    f();
    return GLX_OK;
  } catch (const gloo::IoException &e) {
    const char *w = e.what();
    int timeout = strstr(w, "Timed out") || strstr(w, "timed out") || strstr(w, "Timeout");
    return fail(err, cap, timeout ? GLX_TIMEOUT : GLX_IO, w);
  } catch (const std::exception &e) {
    return fail(err, cap, GLX_ERROR, e.what());
  } catch (...) {
    return fail(err, cap, GLX_ERROR, "unknown C++ exception");
  }
}

// Calls f with a null pointer of the unsigned type of esize bytes (Gloo's setters read
// sizeof of it only).
template <typename F>
void by_size(size_t esize, F &&f) {
  switch (esize) {
    case 1: f((uint8_t *)nullptr); break;
    case 2: f((uint16_t *)nullptr); break;
    case 4: f((uint32_t *)nullptr); break;
    case 8: f((uint64_t *)nullptr); break;
    default: throw std::invalid_argument("element size not 1, 2, 4 or 8 bytes");
  }
}

char dummy[64]; // a valid address for buffers of zero bytes

template <typename T>
T *ptr(const void *p) {
  return (T *)(p ? p : dummy);
}

}  // namespace

extern "C" {

int glx_device_new(const char *hostname, const char *iface, glx_device **out, char *err, size_t cap) {
  *out = nullptr;
  return guarded(err, cap, [&] {
    gloo::transport::tcp::attr attr;
    if (iface && *iface) attr.iface = iface;
    else attr.hostname = hostname;
    auto d = std::make_unique<glx_device>();
    d->dev = gloo::transport::tcp::CreateDevice(attr);
    *out = d.release();
  });
}

void glx_device_free(glx_device *d) { delete d; }

int glx_context_connect(glx_device *d, em_dist_store *store, const char *prefix, int rank, int size,
                        double timeout_s, glx_context **out, char *err, size_t cap) {
  *out = nullptr;
  return guarded(err, cap, [&] {
    StoreAdapter st(store, prefix, timeout_s);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(ms(timeout_s));
    ctx->connectFullMesh(st, d->dev);
    auto c = std::make_unique<glx_context>();
    c->ctx = ctx;
    *out = c.release();
  });
}

void glx_context_free(glx_context *c) { delete c; }

int glx_allreduce(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, glx_reduce_fn fn, void *arg) {
  return guarded(o->err, o->cap, [&] {
    gloo::AllreduceOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setOutput(ptr<T>(buf), n);
    });
    opts.setReduceFunction([fn, arg](void *a, const void *b, const void *x, size_t k) { fn(a, b, x, k, arg); });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::allreduce(opts);
  });
}

int glx_reduce(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, int root, glx_reduce_fn fn,
               void *arg) {
  return guarded(o->err, o->cap, [&] {
    gloo::ReduceOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setOutput(ptr<T>(buf), n);
    });
    opts.setRoot(root);
    opts.setReduceFunction([fn, arg](void *a, const void *b, const void *x, size_t k) { fn(a, b, x, k, arg); });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::reduce(opts);
  });
}

int glx_broadcast(glx_context *c, const glx_op *o, void *buf, size_t n, size_t esize, int root) {
  return guarded(o->err, o->cap, [&] {
    gloo::BroadcastOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setOutput(ptr<T>(buf), n);
    });
    opts.setRoot(root);
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::broadcast(opts);
  });
}

int glx_allgather(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize) {
  return guarded(o->err, o->cap, [&] {
    gloo::AllgatherOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(ptr<T>(in), n);
      opts.setOutput(ptr<T>(out), n * (size_t)c->ctx->size);
    });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::allgather(opts);
  });
}

int glx_allgatherv(glx_context *c, const glx_op *o, const void *in, void *out, const int64_t *counts, size_t esize) {
  return guarded(o->err, o->cap, [&] {
    gloo::AllgathervOptions opts(c->ctx);
    std::vector<size_t> elems(counts, counts + c->ctx->size);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(ptr<T>(in), elems[c->ctx->rank]);
      opts.setOutput(ptr<T>(out), elems);
    });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::allgatherv(opts);
  });
}

int glx_alltoall(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize) {
  return guarded(o->err, o->cap, [&] {
    gloo::AlltoallOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(ptr<T>(in), n);
      opts.setOutput(ptr<T>(out), n);
    });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::alltoall(opts);
  });
}

int glx_alltoallv(glx_context *c, const glx_op *o, const void *in, const int64_t *in_counts, void *out,
                  const int64_t *out_counts, size_t esize) {
  return guarded(o->err, o->cap, [&] {
    gloo::AlltoallvOptions opts(c->ctx);
    std::vector<int64_t> ic(in_counts, in_counts + c->ctx->size), oc(out_counts, out_counts + c->ctx->size);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(ptr<T>(in), ic);
      opts.setOutput(ptr<T>(out), oc);
    });
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::alltoallv(opts);
  });
}

int glx_gather(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize, int root) {
  return guarded(o->err, o->cap, [&] {
    gloo::GatherOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      opts.setInput(ptr<T>(in), n);
      if (c->ctx->rank == root) opts.setOutput(ptr<T>(out), n * (size_t)c->ctx->size);
    });
    opts.setRoot(root);
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::gather(opts);
  });
}

int glx_scatter(glx_context *c, const glx_op *o, const void *in, void *out, size_t n, size_t esize, int root) {
  return guarded(o->err, o->cap, [&] {
    gloo::ScatterOptions opts(c->ctx);
    by_size(esize, [&](auto *t) {
      using T = std::remove_pointer_t<decltype(t)>;
      if (c->ctx->rank == root) {
        std::vector<T *> parts;
        for (int r = 0; r < c->ctx->size; r++) parts.push_back(ptr<T>(in) + (in ? (size_t)r * n : 0));
        opts.setInputs(parts, n);
      }
      opts.setOutput(ptr<T>(out), n);
    });
    opts.setRoot(root);
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::scatter(opts);
  });
}

int glx_barrier(glx_context *c, const glx_op *o) {
  return guarded(o->err, o->cap, [&] {
    gloo::BarrierOptions opts(c->ctx);
    opts.setTag(o->tag);
    opts.setTimeout(ms(o->timeout_s));
    gloo::barrier(opts);
  });
}

int glx_p2p_start(glx_context *c, void *p, size_t bytes, int send, int peer, uint64_t slot, glx_p2p **out,
                  char *err, size_t cap) {
  *out = nullptr;
  return guarded(err, cap, [&] {
    auto x = std::make_unique<glx_p2p>();
    x->send = send;
    x->buf = c->ctx->createUnboundBuffer(p ? p : dummy, bytes);
    if (send) x->buf->send(peer, slot);
    else x->buf->recv(peer, slot);
    *out = x.release();
  });
}

int glx_p2p_wait(glx_p2p *p, double timeout_s, char *err, size_t cap) {
  return guarded(err, cap, [&] {
    if (p->send) p->buf->waitSend(ms(timeout_s));
    else p->buf->waitRecv(ms(timeout_s));
  });
}

void glx_p2p_free(glx_p2p *p) { delete p; }

}  // extern "C"
