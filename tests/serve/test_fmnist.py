#!/usr/bin/env python3
"""pipelines/serve_fmnist_mlp.yaml serves the MLP that pipelines/fashion_mnist_mlp.yaml trains.

In a scratch working folder: train one short epoch (the checkpoint lands in
runs/fashion_mnist_mlp/checkpoints, as the README's command writes it), serve it with
`ember serve`, ask curl for the class of test images, and compare with the class an ember
script computes from the same checkpoint. usage: test_fmnist.py EMBER REPO"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import http.client

EMBER, REPO = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
DATA = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
N = 16

SCRIPT = """
local ember = require 'ember'
local json = require 'ember.util.json'
local cfg = require('ember.pipeline').load(arg[1], {})
local model = require('ember.pipeline.model').build(cfg.model)
local ck = require 'ember.pipeline.checkpoint'
model:load_state_dict(ck.load(ck.latest('runs/fashion_mnist_mlp/checkpoints')).model)
model:eval()
local f = io.open(arg[2]); local x = json.decode(f:read('*a')); f:close()
local logits = ember.no_grad(function() return model(ember.tensor(x):view(#x, 1, 28, 28)) end)
local classes = logits:argmax(2):totable()
io.write(json.encode(classes))
"""


def main():
    if not os.path.exists(DATA):
        print("skipped: Debian's dataset-fashion-mnist is not installed")
        sys.exit(77)
    import gzip
    with gzip.open(DATA) as f:
        raw = f.read()[16:16 + N * 784]
    images = [[(raw[i * 784 + k] / 255 - 0.2860) / 0.3530 for k in range(784)] for i in range(N)]
    tmp = tempfile.mkdtemp(prefix="ember_fmnist_serve_")
    env = dict(os.environ, EMBER_NUM_THREADS="2")
    r = subprocess.run([EMBER, "run", f"{REPO}/pipelines/fashion_mnist_mlp.yaml", "epochs=1", "data.limit=6000",
                        "data.workers=0", "log.progress=none"], cwd=tmp, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(tmp, "x.json"), "w") as f:
        json.dump(images, f)
    with open(os.path.join(tmp, "ref.lua"), "w") as f:
        f.write(SCRIPT)
    r = subprocess.run([EMBER, "ref.lua", f"{REPO}/pipelines/fashion_mnist_mlp.yaml", "x.json"], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    expected = [c - 1 for c in json.loads(r.stdout)]   # Lua's argmax is 1-based
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([EMBER, "serve", f"{REPO}/pipelines/serve_fmnist_mlp.yaml", f"http.port={port}"],
                            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        got = []
        for img in images:
            body = json.dumps({"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32",
                                           "data": img}]})
            out = subprocess.run(["curl", "-s", "-d", body, f"http://127.0.0.1:{port}/v2/models/fmnist_mlp/infer"],
                                 capture_output=True, text=True, timeout=30).stdout
            logits = json.loads(out)["outputs"][0]["data"]
            got.append(max(range(10), key=lambda k: logits[k]))
        print("served classes:", got)
        print("script classes:", expected)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.returncode == 0, proc.stderr.read()
        assert got == expected, "the served classes differ from the script's"
    finally:
        if proc.poll() is None:
            proc.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    print("fmnist serve check passed")


if __name__ == "__main__":
    main()
