#!/usr/bin/env python3
"""`ember serve` end to end: a model file and a checkpoint made here, served over HTTP.

Checks that answers equal the same model's forward in an ember script (one by one, and
batched under concurrent clients with mixed shapes), with http.client and curl as clients;
every bad-input case (400 naming the field, 404, 405, 413); 503 at once from a full queue;
the metrics text; loopback binding; SIGTERM finishing the accepted requests.
usage: test_serve.py EMBER"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import serve_common as sv
from serve_common import FAILS, check, free_port, request, run_ember, write

sv.setup("ember_serve_")
EMBER, TMP = sv.EMBER, sv.TMP

def infer_body(x):
    flat, shape = [], []
    def walk(v, depth):
        if isinstance(v, list):
            if len(shape) <= depth:
                shape.append(len(v))
            for e in v:
                walk(e, depth + 1)
        else:
            flat.append(v)
    walk(x, 0)
    return {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": flat}]}


def flatten(v):
    return [a for e in v for a in flatten(e)] if isinstance(v, list) else [v]


def close(a, b, tol=1e-5):
    a, b = flatten(a), flatten(b)
    return len(a) == len(b) and all(abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b))


def make_input(seed, rows, positions):
    import random
    rng = random.Random(seed)
    return [[[round(rng.uniform(-2, 2), 4) for _ in range(4)] for _ in range(positions)] for _ in range(rows)]


def main():
    model = write("model.lua", sv.MODEL)
    ckpt = os.path.join(TMP, "tiny.safetensors")
    run_ember(write("make_ckpt.lua", sv.MAKE_CKPT), model, ckpt)
    port = free_port()
    cfg = write("serve.yaml", f"""
job: serve
models:
  - name: tiny
    model: {{file: model.lua, args: {{hidden: 16}}}}
    checkpoint: {ckpt}
    inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
    outputs: [{{name: y, dtype: float32}}]
    batching: {{max_batch_size: 8, max_delay_us: 50000, max_queue: 256, policy: deadline}}
    workers: 2
  - name: slow            # batches wait a whole second: a queue that stays full
    model: {{file: model.lua, args: {{hidden: 16}}}}
    checkpoint: {ckpt}
    inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
    outputs: [{{name: y, dtype: float32}}]
    batching: {{max_batch_size: 64, max_delay_us: 1000000, max_queue: 2}}
http: {{port: {port}, threads: 4}}
""")
    # the inputs: one by one, then concurrent with mixed shapes (1, 3 or 5 positions)
    singles = [make_input(i, 1 + i % 2, 1 + 2 * (i % 3)) for i in range(6)]
    mixed = [make_input(100 + i, 1 + i % 3, [1, 3, 5][i % 3]) for i in range(48)]
    inputs_path = write("inputs.json", json.dumps(singles + mixed))
    ref_path = os.path.join(TMP, "ref.json")
    run_ember(write("reference.lua", sv.REFERENCE), model, ckpt, inputs_path, ref_path)
    with open(ref_path) as f:
        ref = json.load(f)

    proc = subprocess.Popen([EMBER, "serve", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                if request(port, "GET", "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            check(proc.poll() is None, "the server exited while starting: " + (proc.stderr.read() if proc.poll() is not None else ""))
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit("the server did not become ready")
            time.sleep(0.1)
        run_checks(port, singles, mixed, ref)
        sigterm_check(proc, port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    device_checks(cfg)
    policy_latency_check(cfg)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    shutil.rmtree(TMP, ignore_errors=True)
    print("all serve checks passed")


def device_checks(cfg):
    """device: a GPU that is not there is refused before serving, naming the key; a device
    that is no device is a schema error. (With a GPU, tests/gpu/run.sh serves on it.)"""
    gpus = subprocess.run([EMBER, "-e", "io.write(ember.cuda.device_count())"], capture_output=True, text=True)
    r = subprocess.run([EMBER, "serve", cfg, "models.1.device=gpu", "http.port=0"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 2 and "models.1.device: expected cpu, cuda or cuda:N, got 'gpu'" in r.stderr,
          f"a device that is no device: {r.returncode} {r.stderr}")
    # the batching policy is one of two words
    r = subprocess.run([EMBER, "serve", cfg, "models.1.batching.policy=eager", "http.port=0"], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 2 and "models.1.batching.policy: expected one of spare, deadline, got 'eager'" in r.stderr,
          f"an unknown batching policy: {r.returncode} {r.stderr}")
    if gpus.stdout.strip() == "0":
        r = subprocess.run([EMBER, "serve", cfg, "models.1.device=cuda", "http.port=0"], capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 2 and "models.1.device: cuda is not available: no CUDA device found" in r.stderr,
              f"device: cuda without a GPU: {r.returncode} {r.stderr}")


def policy_latency_check(cfg):
    """batching.policy end to end: with 2 idle workers and max_delay_us 200 ms, a lone request
    is answered at once under spare and after the delay under deadline."""
    for policy in ("spare", "deadline"):
        port = free_port()
        proc = subprocess.Popen([EMBER, "serve", cfg, f"http.port={port}", "models.1.batching.max_delay_us=200000",
                                 f"models.1.batching.policy={policy}"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            for _ in range(300):
                try:
                    if request(port, "GET", "/v2/health/ready")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            time.sleep(0.1)  # both workers waiting for work
            body = infer_body(make_input(7, 1, 1))
            t0 = time.monotonic()
            st, _ = request(port, "POST", "/v2/models/tiny/infer", json.dumps(body))
            took = time.monotonic() - t0
            want = took < 0.1 if policy == "spare" else took >= 0.2
            check(st == 200 and want, f"policy {policy}: status {st}, a lone request took {took:.3f} s (delay 0.2 s)")
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def run_checks(port, singles, mixed, ref):
    # health and metadata
    check(request(port, "GET", "/v2/health/live") == (200, '{"live":true}'), "live")
    st, meta = request(port, "GET", "/v2/models/tiny")
    meta = json.loads(meta)
    check(st == 200 and meta["name"] == "tiny" and meta["inputs"][0]["shape"] == [-1, -1, 4]
          and meta["outputs"][0]["datatype"] == "FP32", f"metadata {meta}")
    check(request(port, "GET", "/v2/models/tiny/ready")[0] == 200, "model ready")

    # one by one, with http.client
    for i, x in enumerate(singles):
        st, text = request(port, "POST", "/v2/models/tiny/infer", infer_body(x))
        out = json.loads(text)["outputs"][0] if st == 200 else None
        check(st == 200 and out["shape"] == [len(x), len(x[0]), 3] and close(out["data"], ref[i]),
              f"single request {i}: {st} {text[:200]}")

    # concurrently, mixed shapes: batched with their own shape only, each answer its own
    def one(i):
        st, text = request(port, "POST", "/v2/models/tiny/infer", dict(infer_body(mixed[i]), id=f"r{i}"))
        return i, st, text
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(len(mixed))))
    for i, st, text in results:
        ok = st == 200
        if ok:
            body = json.loads(text)
            out = body["outputs"][0]
            ok = body.get("id") == f"r{i}" and out["shape"] == [len(mixed[i]), len(mixed[i][0]), 3] and \
                close(out["data"], ref[len(singles) + i])
        check(ok, f"concurrent request {i}: {st} {text[:200]}")
    metrics = request(port, "GET", "/metrics")[1]
    rows_sum = float(re.search(r'ember_serve_batch_size_sum\{model="tiny"\} (\S+)', metrics).group(1))
    batches = int(re.search(r'ember_serve_batch_size_count\{model="tiny"\} (\d+)', metrics).group(1))
    total_rows = sum(len(x) for x in singles + mixed)
    check(rows_sum == total_rows, f"batch rows {rows_sum} == rows sent {total_rows}")
    check(batches < len(singles) + len(mixed), f"concurrent requests were batched ({batches} batches)")

    # curl as a client
    if shutil.which("curl"):
        r = subprocess.run(["curl", "-s", "-X", "POST", "-H", "Content-Type: application/json", "-d",
                            json.dumps(infer_body(singles[0])), f"http://127.0.0.1:{port}/v2/models/tiny/infer"],
                           capture_output=True, text=True, timeout=30)
        out = json.loads(r.stdout)["outputs"][0]
        check(out["name"] == "y" and close(out["data"], ref[0]), f"curl: {r.stdout[:200]}")

    binary_checks(port, singles, ref)

    # bad input: status and a message naming the field
    good = infer_body(singles[0])["inputs"][0]
    def with_input(**kv):
        d = dict(good)
        for k, v in kv.items():
            if v is None:
                d.pop(k)
            else:
                d[k] = v
        return {"inputs": [d]}
    cases = [
        ("malformed JSON", '{"inputs": [', 400, "malformed JSON"),
        ("not an object", "[1, 2]", 400, "expected an object"),
        ("no inputs", {"input": []}, 400, "unknown field 'input'"),
        ("inputs missing", {}, 400, "inputs: missing"),
        ("unknown input field", with_input(dtype="FP32"), 400, "inputs[0]: unknown field 'dtype'"),
        ("wrong input name", with_input(name="z"), 400, "inputs[0].name: model 'tiny' has no input 'z'"),
        ("no datatype", with_input(datatype=None), 400, "inputs[0] (x).datatype: missing"),
        ("wrong datatype", with_input(datatype="INT64"), 400, "inputs[0] (x).datatype: expected FP32, got 'INT64'"),
        ("wrong rank", with_input(shape=[1, 4]), 400, "inputs[0] (x).shape: expected 3 dimensions"),
        ("wrong size", with_input(shape=[1, 1, 5]), 400, "inputs[0] (x).shape[2]: expected 4, got 5"),
        ("negative size", with_input(shape=[1, -1, 4]), 400, "inputs[0] (x).shape[1]: expected a size >= 0, got -1"),
        ("huge size", with_input(shape=[99999999999, 1, 4]), 400,
         "inputs[0] (x).shape[0]: 99999999999 makes more than the 268435456 elements a request may carry"),
        ("huge product", with_input(shape=[8, 99999999, 4]), 400, "inputs[0] (x).shape[1]: 99999999 makes more than"),
        ("too few values", with_input(data=good["data"][:-1]), 400, "inputs[0] (x).data"),
        ("strings as data", with_input(data=["a"] * len(good["data"])), 400, "inputs[0] (x).data: expected numbers"),
        ("input twice", {"inputs": [good, good]}, 400, "given twice"),
        ("too many rows", with_input(shape=[9, 1, 4], data=[0.0] * 36), 413, "max_batch_size 8"),
    ]
    for what, body, status, needle in cases:
        st, text = request(port, "POST", "/v2/models/tiny/infer", body)
        msg = json.loads(text).get("error", "") if text.startswith("{") else text
        check(st == status and needle in msg, f"{what}: expected {status} with '{needle}', got {st} {msg}")
    st, text = request(port, "POST", "/v2/models/nope/infer", infer_body(singles[0]))
    check(st == 404 and "nope" in text, f"unknown model: {st} {text}")
    check(request(port, "GET", "/v2/models/nope")[0] == 404, "unknown model metadata")
    check(request(port, "GET", "/v2/models/tiny/infer")[0] == 405, "GET infer")
    check(request(port, "GET", "/nowhere")[0] == 404, "unknown path")

    # a full queue answers 503 at once: two requests wait a second for their batch
    waiting = []
    def slow():
        waiting.append(request(port, "POST", "/v2/models/slow/infer", infer_body(singles[0])))
    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.time()
    st, text = request(port, "POST", "/v2/models/slow/infer", infer_body(singles[0]))
    check(st == 503 and "queue is full" in text and time.time() - t0 < 0.5, f"full queue: {st} {text}")
    for t in threads:
        t.join()
    check([s for s, _ in waiting] == [200, 200], f"queued requests answered: {waiting}")

    # metrics
    metrics = request(port, "GET", "/metrics")
    check(metrics[0] == 200, "metrics status")
    text = metrics[1]
    for name in ["ember_serve_requests_total", "ember_serve_errors_total", "ember_serve_queue_seconds_bucket",
                 "ember_serve_compute_seconds_bucket", "ember_serve_request_seconds_bucket",
                 "ember_serve_batch_size_bucket", "# TYPE ember_serve_request_seconds histogram"]:
        check(name in text, f"metrics: {name}")
    client = int(re.search(r'ember_serve_errors_total\{model="tiny",kind="client"\} (\d+)', text).group(1))
    check(client == len(cases) + 5, f"client errors counted: {client} (expected {len(cases)} + 5 binary)")
    full = int(re.search(r'ember_serve_errors_total\{model="slow",kind="queue_full"\} (\d+)', text).group(1))
    check(full == 1, f"queue_full counted: {full}")
    n404 = int(re.search(r'ember_serve_http_errors_total\{code="404"\} (\d+)', text).group(1))
    check(n404 == 3, f"404s counted: {n404}")

    # bound to loopback only (the YAML names no interface)
    with open("/proc/net/tcp") as f:
        listen = [l.split() for l in f.read().splitlines()[1:] if l.split()[3] == "0A"]
    mine = [l for l in listen if int(l[1].split(":")[1], 16) == port]
    check(len(mine) == 1 and mine[0][1].split(":")[0] == "0100007F", f"listens on 127.0.0.1 only: {mine}")


def binary_checks(port, singles, ref):
    """The binary tensor extension: inputs as raw bytes after the JSON (its length in the
    Inference-Header-Content-Length header), outputs asked as binary data likewise."""
    import struct

    def post(json_part, binary, header=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v2/models/tiny/infer", body=json_part + binary,
                  headers={"Inference-Header-Content-Length": header or str(len(json_part)),
                           "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, r.getheader("Inference-Header-Content-Length"), body

    for i, x in enumerate(singles[:3]):
        flat = flatten(x)
        shape = [len(x), len(x[0]), 4]
        raw = struct.pack(f"<{len(flat)}f", *flat)
        for binary_out in (False, True):
            req = {"inputs": [{"name": "x", "shape": shape, "datatype": "FP32",
                               "parameters": {"binary_data_size": len(raw)}}]}
            if binary_out:
                req["parameters"] = {"binary_data_output": True}
            js = json.dumps(req).encode()
            st, hlen, body = post(js, raw)
            if binary_out:
                n = int(hlen or 0)
                meta = json.loads(body[:n]) if st == 200 else {}
                out = meta.get("outputs", [{}])[0]
                values = list(struct.unpack(f"<{(len(body) - n) // 4}f", body[n:]))
                ok = st == 200 and out.get("parameters", {}).get("binary_data_size") == len(body) - n and \
                    "data" not in out and close(values, ref[i])
            else:
                ok = st == 200 and hlen is None and close(json.loads(body)["outputs"][0]["data"], ref[i])
            check(ok, f"binary request {i} (binary outputs: {binary_out}): {st} {body[:200]}")
    x = singles[0]
    flat = flatten(x)
    raw = struct.pack(f"<{len(flat)}f", *flat)
    js = json.dumps({"inputs": [{"name": "x", "shape": [1, 1, 4], "datatype": "FP32",
                                 "parameters": {"binary_data_size": len(raw)}}]}).encode()
    bad = [
        ("binary data cut short", js, raw[:-4], None, "inputs[0] (x).parameters.binary_data_size: 16 bytes, but only 12"),
        ("binary data left over", js, raw + b"xxxx", None, "binary data: 20 bytes after the JSON"),
        ("a wrong binary_data_size", js.replace(b'"binary_data_size": 16', b'"binary_data_size": 12'), raw, None,
         "inputs[0] (x).parameters.binary_data_size: 12 bytes, expected 16"),
        ("a header longer than the body", js, raw, "100000", "Inference-Header-Content-Length: '100000'"),
        ("a header that is not a number", js, raw, "ten", "Inference-Header-Content-Length: 'ten'"),
    ]
    for what, j, b, h, needle in bad:
        st, _, body = post(j, b, h)
        msg = json.loads(body).get("error", "") if body.startswith(b"{") else body.decode(errors="replace")
        check(st == 400 and needle in msg, f"{what}: expected 400 with '{needle}', got {st} {msg}")


def sigterm_check(proc, port):
    """Requests accepted before SIGTERM are answered; then the server exits 0."""
    answers = []
    def slow():
        answers.append(request(port, "POST", "/v2/models/slow/infer", infer_body([[[1.0, 2.0, 3.0, 4.0]]])))
    threads = [threading.Thread(target=slow) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # both queued, waiting for their (one second) batch
    proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=30)
    check([s for s, _ in answers] == [200, 200], f"accepted requests answered after SIGTERM: {answers}")
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        check(False, "the server did not exit after SIGTERM")
        return
    check(proc.returncode == 0, f"exit status after SIGTERM: {proc.returncode} ({err})")
    check('"served":' in out, f"result line: {out}")
    try:
        request(port, "GET", "/v2/health/live", timeout=2)
        check(False, "the port still answers after shutdown")
    except OSError:
        pass


if __name__ == "__main__":
    main()
