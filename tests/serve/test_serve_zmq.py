#!/usr/bin/env python3
"""`ember serve`'s ZeroMQ endpoint end to end.

Answers from the Python client (examples/serve_client.py) and the Lua client
(ember.serve.Client) equal the model's forward in a script, one by one and from concurrent
clients with mixed shapes; malformed messages (short, wrong magic or version, a bad desc,
frame counts, too many frames, an unknown model, wrong names, dtypes and shapes) get ERROR
answers naming the field and never stop the server; a REQ peer is answered too; a full
queue answers 503 at once. Binding: `zmq: PORT` and the default http host listen on
127.0.0.1 only; `zmq: tcp://0.0.0.0:P` and `http.host: 0.0.0.0` on every interface.
usage: test_serve_zmq.py EMBER SOURCE_DIR"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np
    import zmq
except ImportError as e:
    print(f"skipped: {e} (pyzmq and numpy: Debian python3-zmq, python3-numpy)")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[2], "examples"))
import serve_client as sc  # noqa: E402
import serve_common as sv  # noqa: E402
from serve_common import FAILS, check, free_port, run_ember, write  # noqa: E402

sv.setup("ember_serve_zmq_")
EMBER, TMP = sv.EMBER, sv.TMP

# The Lua client: the same inputs, the outputs as JSON; then a bad shape's message.
LUA_CLIENT = """
local ember = require 'ember'
local json = require 'ember.util.json'
local c = ember.serve.Client{endpoint = arg[1], timeout = 30}
local f = io.open(arg[2]); local inputs = json.decode(f:read('*a')); f:close()
local out = {outputs = {}}
for i, x in ipairs(inputs) do out.outputs[i] = c:infer('tiny', {x = ember.tensor(x)}).y:totable() end
local ok, err = pcall(function() return c:infer('tiny', {x = ember.zeros({1, 2, 5})}) end)
out.error = ok and 'no error' or tostring(err)
out.version = c:version()
c:close()
-- nobody listening: a timeout naming the model and the endpoint, not a hang
local gone = ember.serve.Client{endpoint = arg[4], timeout = 0.3}
ok, err = pcall(function() return gone:infer('tiny', {x = ember.zeros({1, 1, 4})}) end)
out.timeout = ok and 'no error' or tostring(err)
f = io.open(arg[3], 'w'); f:write(json.encode(out)); f:close()
"""


def listening(port):
    """The local addresses (hex, as /proc/net/tcp writes them) listening on port."""
    with open("/proc/net/tcp") as f:
        rows = [l.split() for l in f.read().splitlines()[1:]]
    return [r[1].split(":")[0] for r in rows if r[3] == "0A" and int(r[1].split(":")[1], 16) == port]


def start(cfg, http_port):
    proc = subprocess.Popen([EMBER, "serve", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    import http.client
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the server exited while starting: " + proc.stderr.read())
        try:
            c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=5)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not become ready")


def stop(proc):
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        check(False, "the server did not exit after SIGTERM")
        return
    check(proc.returncode == 0, f"exit status after SIGTERM: {proc.returncode} ({err[-500:]})")


def make_input(rng, rows, positions):
    return rng.uniform(-2, 2, size=(rows, positions, 4)).round(4).astype(np.float32)


def raw_send(endpoint, frames, sock_type=zmq.DEALER):
    """Sends frames from a fresh socket and returns the answer's frames (None on timeout)."""
    s = zmq.Context.instance().socket(sock_type)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send_multipart(frames)
    answer = s.recv_multipart() if s.poll(10000) else None
    s.close()
    return answer


def error_of(frames):
    """(status, message) of an ERROR answer, or None."""
    if frames and frames[0] == b"":  # an empty first frame reads as a REQ delimiter, echoed
        frames = frames[1:]
    if not frames:
        return None
    h = sc.HEADER.unpack_from(frames[0])
    return (h[5], frames[1].decode()) if h[2] == sc.ERROR else None


def main():
    model = write("model.lua", sv.MODEL)
    ckpt = os.path.join(TMP, "tiny.safetensors")
    run_ember(write("make_ckpt.lua", sv.MAKE_CKPT), model, ckpt)
    http_port, zmq_port = free_port(), free_port()
    endpoint = f"tcp://127.0.0.1:{zmq_port}"
    cfg = write("serve.yaml", f"""
job: serve
models:
  - name: tiny
    model: {{file: model.lua, args: {{hidden: 16}}}}
    checkpoint: {ckpt}
    inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
    outputs: [{{name: y, dtype: float32}}]
    batching: {{max_batch_size: 8, max_delay_us: 20000, max_queue: 256}}
    workers: 2
  - name: slow
    model: {{file: model.lua, args: {{hidden: 16}}}}
    checkpoint: {ckpt}
    inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
    outputs: [{{name: y, dtype: float32}}]
    batching: {{max_batch_size: 64, max_delay_us: 1000000, max_queue: 2}}
http: {{port: {http_port}}}
zmq: {zmq_port}
""")
    rng = np.random.default_rng(5)
    inputs = [make_input(rng, 1 + i % 3, [1, 3, 5][i % 3]) for i in range(30)]
    inputs_path = write("inputs.json", json.dumps([x.tolist() for x in inputs]))
    ref_path = os.path.join(TMP, "ref.json")
    run_ember(write("reference.lua", sv.REFERENCE), model, ckpt, inputs_path, ref_path)
    with open(ref_path) as f:
        ref = [np.array(r, dtype=np.float32) for r in json.load(f)]

    proc = start(cfg, http_port)
    try:
        check(listening(zmq_port) == ["0100007F"], f"zmq: PORT listens on 127.0.0.1 only: {listening(zmq_port)}")
        check(listening(http_port) == ["0100007F"], f"http listens on 127.0.0.1 only: {listening(http_port)}")

        # the Python client, one by one
        c = sc.Client(endpoint)
        for i in range(6):
            out = c.infer("tiny", {"x": inputs[i]})
            check(out["y"].shape == ref[i].shape and np.allclose(out["y"], ref[i], rtol=1e-5, atol=1e-6),
                  f"python client, request {i}")
        check(c.version == 1, f"the answer names version 1: {c.version}")

        # concurrent clients (a socket each), mixed shapes: each answer its own
        def one(i):
            cl = sc.Client(endpoint)
            try:
                return i, cl.infer("tiny", {"x": inputs[i]})["y"]
            finally:
                cl.close()
        with ThreadPoolExecutor(12) as pool:
            for i, y in pool.map(one, range(len(inputs))):
                check(y.shape == ref[i].shape and np.allclose(y, ref[i], rtol=1e-5, atol=1e-6),
                      f"concurrent request {i}")

        # the Lua client
        lua_out = os.path.join(TMP, "lua_out.json")
        run_ember(write("client.lua", LUA_CLIENT), endpoint, inputs_path, lua_out, f"tcp://127.0.0.1:{free_port()}")
        with open(lua_out) as f:
            got = json.load(f)
        for i in range(len(inputs)):
            check(np.allclose(np.array(got["outputs"][i], dtype=np.float32), ref[i], rtol=1e-5, atol=1e-6),
                  f"lua client, request {i}")
        check("answered 400" in got["error"] and "tensors[0] (x).shape[2]: expected 4, got 5" in got["error"],
              f"lua client: a bad shape's error names the field: {got['error']}")
        check(got["version"] == 1, f"lua client version: {got['version']}")
        check("no answer within 0.3 s" in got["timeout"] and "tiny" in got["timeout"],
              f"lua client: a timeout without a server: {got['timeout']}")

        malformed_checks(endpoint, inputs[0], ref[0])
        full_queue_check(endpoint)

        # still serving after all of that
        out = sc.Client(endpoint).infer("tiny", {"x": inputs[1]})
        check(np.allclose(out["y"], ref[1], rtol=1e-5, atol=1e-6), "serving after the malformed messages")
    finally:
        if proc.poll() is None:
            stop(proc)

    # naming an interface: every interface, for both endpoints
    http_port, zmq_port = free_port(), free_port()
    with open(cfg) as f:
        models = f.read().split("\nhttp:")[0]
    cfg = write("serve_all.yaml", models + f"\nhttp: {{host: 0.0.0.0, port: {http_port}}}\nzmq: tcp://0.0.0.0:{zmq_port}\n")
    proc = start(cfg, http_port)
    try:
        check(listening(zmq_port) == ["00000000"], f"zmq: tcp://0.0.0.0:P listens on every interface: {listening(zmq_port)}")
        check(listening(http_port) == ["00000000"], f"http.host 0.0.0.0 listens on every interface: {listening(http_port)}")
        out = sc.Client(f"tcp://127.0.0.1:{zmq_port}").infer("tiny", {"x": inputs[2]})
        check(np.allclose(out["y"], ref[2], rtol=1e-5, atol=1e-6), "answer on every interface")
    finally:
        if proc.poll() is None:
            stop(proc)

    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    shutil.rmtree(TMP, ignore_errors=True)
    print("all zmq serve checks passed")


def malformed_checks(endpoint, x, y_ref):
    good = sc.encode(sc.INFER, 42, "tiny", {"x": x})
    hdr = bytearray(good[0])
    desc = bytearray(good[1])

    def with_header(**kv):
        f = dict(zip(["magic", "version", "kind", "id", "mv", "status", "name_len", "ntensors"],
                     sc.HEADER.unpack_from(good[0])))
        f.update(kv)
        return sc.HEADER.pack(*f.values()) + good[0][sc.HEADER.size:]

    too_many = [with_header(ntensors=1)] + [good[1], good[2]] * 20
    cases = [
        ("an empty header frame (read as a delimiter)", [b""] + good[1:], 400, "header"),
        ("only a delimiter", [b""], 400, "header: missing"),
        ("a short header", [bytes(hdr[:10])] + good[1:], 400, "header: 10 bytes"),
        ("wrong magic", [with_header(magic=0x12345678)] + good[1:], 400, "header.magic"),
        ("wrong version", [with_header(version=9)] + good[1:], 400, "header.version: 9"),
        ("wrong kind", [with_header(kind=7)] + good[1:], 400, "header.kind: 7"),
        ("name length beyond the frame", [with_header(name_len=200)] + good[1:], 400, "header.name_len: 200"),
        ("unknown model", sc.encode(sc.INFER, 1, "nope", {"x": x}), 404, "no model named 'nope'"),
        ("a RESULT sent as a request", [with_header(kind=sc.RESULT)] + good[1:], 400, "expected 1 (INFER)"),
        ("too few frames", [with_header(ntensors=2)] + good[1:], 400, "header.ntensors: 2"),
        ("a data frame missing", good[:2], 400, "header.ntensors: 1"),
        ("too many tensors", [with_header(ntensors=99)] + good[1:], 400, "header.ntensors: 99"),
        ("too many frames", too_many, 400, "more than"),
        ("a short desc", [good[0], bytes(desc[:5]), good[2]], 400, "tensors[0].desc: 5 bytes"),
        ("a desc with a bad dtype code", [good[0], bytes([9]) + bytes(desc[1:]), good[2]], 400, "tensors[0].dtype: code 9"),
        ("a desc with 12 dimensions", [good[0], bytes(desc[:1]) + bytes([12]) + bytes(desc[2:]), good[2]], 400,
         "tensors[0].ndim: 12"),
        ("data of the wrong size", [good[0], good[1], good[2][:-4]], 400, "tensors[0] (x).data"),
        ("wrong input name", sc.encode(sc.INFER, 1, "tiny", {"z": x}), 400, "tensors[0].name: model 'tiny' has no input 'z'"),
        ("wrong dtype", sc.encode(sc.INFER, 1, "tiny", {"x": x.astype(np.float64)}), 400,
         "tensors[0] (x).dtype: expected FP32, got FP64"),
        ("wrong rank", sc.encode(sc.INFER, 1, "tiny", {"x": x[0]}), 400, "tensors[0] (x).shape: expected 3 dimensions"),
        ("wrong size", sc.encode(sc.INFER, 1, "tiny", {"x": np.zeros((1, 2, 5), np.float32)}), 400,
         "tensors[0] (x).shape[2]: expected 4, got 5"),
        ("too many rows", sc.encode(sc.INFER, 1, "tiny", {"x": np.zeros((9, 1, 4), np.float32)}), 413,
         "max_batch_size 8"),
        ("no rows", sc.encode(sc.INFER, 1, "tiny", {"x": np.zeros((0, 1, 4), np.float32)}), 400, "shape[0]"),
        ("input twice", [with_header(ntensors=2)] + good[1:] + good[1:], 400, "given twice"),
        ("no tensors", [with_header(ntensors=0)], 400, "the input 'x' is missing"),
    ]
    for what, frames, status, needle in cases:
        err = error_of(raw_send(endpoint, frames))
        check(err is not None and err[0] == status and needle in err[1],
              f"{what}: expected {status} with '{needle}', got {err}")
    # an empty message after the routing id, and random bytes, answered and survived
    err = error_of(raw_send(endpoint, [os.urandom(64)]))
    check(err is not None and err[0] == 400 and "header" in err[1], f"random bytes: {err}")
    # a REQ peer (an empty delimiter frame before the message) gets its answer
    ans = raw_send(endpoint, good, zmq.REQ)
    check(ans is not None and np.allclose(sc.decode(ans)[2]["y"], y_ref, rtol=1e-5, atol=1e-6) and
          sc.decode(ans)[0] == 42, "a REQ socket's request is answered with its id")


def full_queue_check(endpoint):
    """Two requests wait a second for their batch; a third gets 503 at once."""
    x = np.ones((1, 1, 4), np.float32)
    answers = []
    def slow():
        try:
            answers.append(sc.Client(endpoint).infer("slow", {"x": x})["y"].shape)
        except Exception as e:  # noqa: BLE001
            answers.append(str(e))
    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.time()
    err = error_of(raw_send(endpoint, sc.encode(sc.INFER, 5, "slow", {"x": x})))
    check(err is not None and err[0] == 503 and "queue is full" in err[1] and time.time() - t0 < 0.5,
          f"full queue: {err}")
    for t in threads:
        t.join()
    check(answers == [(1, 1, 3), (1, 1, 3)], f"the queued requests are answered: {answers}")


if __name__ == "__main__":
    main()
