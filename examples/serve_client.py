#!/usr/bin/env python3
"""A Python client of `ember serve`'s ZeroMQ endpoint (pyzmq + numpy).

    python3 examples/serve_client.py tcp://127.0.0.1:5556 fmnist_mlp [N]

sends the first N (default 8) Fashion-MNIST test images, normalised as in training, to the
model and prints the classes it answers. As a library:

    from serve_client import Client
    c = Client("tcp://127.0.0.1:5556")
    out = c.infer("fmnist_mlp", {"input": x})   # x: numpy [n, 1, 28, 28] float32
    out["logits"].argmax(1); c.version          # the model version that answered
    c.load("fmnist_mlp", "runs/fashion_mnist_mlp/checkpoints")   # the next version (a path on the server)
    c.unload("fmnist_mlp")                      # refuses requests until the next load

The protocol (runtime/serve/wire.c): a DEALER sends [header + model name] then, per tensor,
[desc][raw bytes]; the answer is RESULT (the outputs, the same way) or ERROR (status, and a
message naming the field). Little-endian throughout:
    header  <IHHQqHHI: magic "EMSV", version 1, kind (1 INFER, 2 RESULT, 3 ERROR, 4 LOAD: one
            frame with the checkpoint path follows, 5 UNLOAD: none), request id,
            model version (RESULT), status, the model name's length, tensor count
    desc    <BBHI: dtype code, ndim, the name's length, 0; then int64 shape[ndim], the name
"""
import struct
import sys

import numpy as np
import zmq

MAGIC, VERSION = 0x56534D45, 1
INFER, RESULT, ERROR, LOAD, UNLOAD = 1, 2, 3, 4, 5
HEADER = struct.Struct("<IHHQqHHI")
DESC = struct.Struct("<BBHI")
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_]  # codes 1..6


class ServeError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status


def encode(kind, request_id, model, tensors, model_version=0, status=0):
    name = model.encode()
    frames = [HEADER.pack(MAGIC, VERSION, kind, request_id, model_version, status, len(name), len(tensors)) + name]
    for tname, array in tensors.items():
        a = np.ascontiguousarray(array)
        code = [i for i, t in enumerate(DTYPES) if a.dtype == t]
        if not code:
            raise TypeError(f"input '{tname}': dtype {a.dtype} cannot be sent (float32, float64, int32, int64, uint8, bool)")
        n = tname.encode()
        frames.append(DESC.pack(code[0] + 1, a.ndim, len(n), 0) + struct.pack(f"<{a.ndim}q", *a.shape) + n)
        frames.append(a.tobytes())
    return frames


def decode(frames):
    """An answer: (header fields, {name: array}) for RESULT; raises ServeError for ERROR."""
    magic, version, kind, request_id, model_version, status, name_len, ntensors = HEADER.unpack_from(frames[0])
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not an ember serve answer (magic {magic:#x}, version {version})")
    if kind == ERROR:
        raise ServeError(status, frames[1].decode(errors="replace") if len(frames) > 1 else "")
    out = {}
    for k in range(ntensors):
        desc, data = frames[1 + 2 * k], frames[2 + 2 * k]
        code, ndim, nlen, _ = DESC.unpack_from(desc)
        shape = struct.unpack_from(f"<{ndim}q", desc, DESC.size)
        name = desc[DESC.size + 8 * ndim:].decode()
        out[name] = np.frombuffer(data, dtype=DTYPES[code - 1]).reshape(shape)
    return request_id, model_version, out


class Client:
    def __init__(self, endpoint, timeout=30.0):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.timeout_ms = int(timeout * 1000)
        self.next_id = 1
        self.version = 0

    def infer(self, model, inputs):
        _, self.version, out = self._exchange(model, encode(INFER, self.next_id, model, inputs))
        return out

    def load(self, model, checkpoint=None):
        """Loads a checkpoint (on the server's machine; None: the one the model was started with,
        read again) as the model's next version; its number."""
        frames = encode(LOAD, self.next_id, model, {}) + ([checkpoint.encode()] if checkpoint is not None else [])
        _, self.version, _ = self._exchange(model, frames)
        return self.version

    def unload(self, model):
        """The model refuses requests until the next load; the version unloaded."""
        _, version, _ = self._exchange(model, encode(UNLOAD, self.next_id, model, {}))
        return version

    def _exchange(self, model, frames):
        request_id = self.next_id
        self.next_id += 1
        self.sock.send_multipart(frames)
        while True:
            if not self.sock.poll(self.timeout_ms):
                raise TimeoutError(f"model '{model}': no answer within {self.timeout_ms / 1000} s")
            frames = self.sock.recv_multipart()
            if HEADER.unpack_from(frames[0])[3] != request_id:
                continue  # the answer to a request given up on
            return decode(frames)

    def close(self):
        self.sock.close()


def main():
    endpoint, model = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    import gzip
    raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + n * 784]
    x = ((np.frombuffer(raw, np.uint8).astype(np.float32) / 255 - 0.2860) / 0.3530).reshape(n, 1, 28, 28)
    out = Client(endpoint).infer(model, {"input": x})
    logits = next(iter(out.values()))
    print(" ".join(str(int(c)) for c in logits.argmax(1)))


if __name__ == "__main__":
    main()
