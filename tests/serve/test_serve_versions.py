#!/usr/bin/env python3
"""Model versions in `ember serve`: checkpoints swapped in under load.

While HTTP and ZeroMQ clients send requests without pause, POST /v2/repository/models/
tiny/load swaps versions in and out: checkpoint B, then D (whose outputs have the wrong
shape), A again, C (weights of another size), a missing file, then B. Every answer must be
200 and equal the forward (in a script) of the checkpoint of the version it names; answers
come from more than one version; the failed loads answer 400 saying why, leave the old
version serving, and GET /v2/models/tiny reports every version with its state. Then
POST .../unload (503 for requests, not ready, no serving version) and a load bringing it
back, over HTTP and through the Lua client over ZeroMQ (Client:load, Client:unload).
usage: test_serve_versions.py EMBER SOURCE_DIR"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

try:
    import numpy as np
    import zmq  # noqa: F401 (the client below needs it)
except ImportError as e:
    print(f"skipped: {e} (pyzmq and numpy: Debian python3-zmq, python3-numpy)")
    sys.exit(77)

sys.path.insert(0, os.path.join(sys.argv[2], "examples"))
import serve_client as sc  # noqa: E402
import serve_common as sv  # noqa: E402
from serve_common import FAILS, check, free_port, request, run_ember, write  # noqa: E402

sv.setup("ember_serve_versions_")
EMBER, TMP = sv.EMBER, sv.TMP


# An MLP whose output keeps the first `width` columns (a buffer saved in the checkpoint), so a
# checkpoint can load cleanly and still give outputs of another shape.
MODEL = """
local ember = require 'ember'
local nn = ember.nn
local Net = nn.Module:extend('VersionedNet')
function Net:init(hidden)
  self.body = nn.Sequential{ nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 3) }
  self:register_buffer('width', ember.tensor({3}))
end
function Net:forward(x)
  local y = self.body(x)
  local w = math.floor(self.width:totable()[1])
  if w < 3 then y = y:narrow(#y.shape, 1, w) end
  return y
end
return function(args) return Net(args.hidden) end
"""
# make_ckpt.lua MODEL OUT SEED HIDDEN WIDTH
MAKE_CKPT = """
local ember = require 'ember'
ember.manual_seed(tonumber(arg[3]))
local model = require('ember.pipeline.model').from_file(arg[1], {hidden = tonumber(arg[4])})
model:register_buffer('width', ember.tensor({tonumber(arg[5])}))
ember.save(arg[2], model:state_dict())
"""
def main():
    model = write("model.lua", MODEL)
    make = write("make_ckpt.lua", MAKE_CKPT)
    ckpt = {}
    for name, seed, hidden, width in [("A", 7, 16, 3), ("B", 8, 16, 3), ("C", 9, 32, 3), ("D", 7, 16, 2)]:
        ckpt[name] = os.path.join(TMP, f"{name}.safetensors")
        run_ember(make, model, ckpt[name], str(seed), str(hidden), str(width))
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-2, 2, size=(1 + i % 3, [1, 3, 5][i % 3], 4)).round(4).astype(np.float32) for i in range(24)]
    inputs_path = write("inputs.json", json.dumps([x.tolist() for x in inputs]))
    ref = {}
    for name in ("A", "B"):
        out = os.path.join(TMP, f"ref_{name}.json")
        run_ember(write("reference.lua", sv.REFERENCE), model, ckpt[name], inputs_path, out)
        with open(out) as f:
            ref[name] = [np.array(r, dtype=np.float32) for r in json.load(f)]
    check(not np.allclose(ref["A"][0], ref["B"][0]), "A and B give different outputs (the test can tell them apart)")

    http_port, zmq_port = free_port(), free_port()
    cfg = write("serve.yaml", f"""
job: serve
models:
  - name: tiny
    model: {{file: model.lua, args: {{hidden: 16}}}}
    checkpoint: {ckpt['A']}
    inputs: [{{name: x, dtype: float32, shape: [-1, 4]}}]
    outputs: [{{name: y, dtype: float32, shape: [-1, 3]}}]
    batching: {{max_batch_size: 16, max_delay_us: 1000, max_queue: 1024}}
    workers: 2
http: {{port: {http_port}, threads: 4}}
zmq: {zmq_port}
""")
    proc = subprocess.Popen([EMBER, "serve", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                if request(http_port, "GET", "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit("the server did not become ready: " + (proc.stderr.read() if proc.poll() is not None else ""))
            time.sleep(0.1)
        version = swap_under_load(http_port, zmq_port, ckpt, inputs, ref)
        unload_and_zmq_loads(http_port, zmq_port, ckpt, inputs, ref, version)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        check(proc.returncode == 0, f"the server's exit status: {proc.returncode}")
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    shutil.rmtree(TMP, ignore_errors=True)
    print("all version checks passed")


def swap_under_load(http_port, zmq_port, ckpt, inputs, ref):
    stop = threading.Event()
    answers = []  # (client, input index, status, version, output or message)
    lock = threading.Lock()

    def http_client(k):
        i = k
        while not stop.is_set():
            x = inputs[i % len(inputs)]
            body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
            try:
                st, text = request(http_port, "POST", "/v2/models/tiny/infer", body)
                d = json.loads(text)
                got = (st, int(d.get("model_version", 0)),
                       np.array(d["outputs"][0]["data"], np.float32).reshape(d["outputs"][0]["shape"]) if st == 200
                       else d.get("error"))
            except Exception as e:  # noqa: BLE001
                got = (0, 0, repr(e))
            with lock:
                answers.append((f"http{k}", i % len(inputs)) + got)
            i += 5

    def zmq_client(k):
        c = sc.Client(f"tcp://127.0.0.1:{zmq_port}")
        i = k
        while not stop.is_set():
            try:
                y = c.infer("tiny", {"x": inputs[i % len(inputs)]})["y"]
                got = (200, c.version, y)
            except Exception as e:  # noqa: BLE001
                got = (getattr(e, "status", 0), 0, repr(e))
            with lock:
                answers.append((f"zmq{k}", i % len(inputs)) + got)
            i += 3
        c.close()

    threads = [threading.Thread(target=http_client, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=zmq_client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    # version: checkpoint (None: the load fails); the reason a failure names
    plan = [("B", 200, None), ("D", 400, "output 'y': shape [1, 1, 2], the declared one is [n, -1, 3]"),
            ("A", 200, None), ("C", 400, "size mismatch"), ("missing", 400, "no such file or directory"),
            ("B", 200, None)]
    version_ckpt = {1: "A"}
    version = 1
    try:
        for name, status, reason in plan:
            time.sleep(0.4)
            path = ckpt.get(name, os.path.join(TMP, "missing.safetensors"))
            st, text = request(http_port, "POST", "/v2/repository/models/tiny/load", {"parameters": {"checkpoint": path}},
                              timeout=60)
            d = json.loads(text)
            version += 1
            if status == 200:
                version_ckpt[version] = name
                check(st == 200 and d.get("version") == str(version), f"load {name}: {st} {text}")
            else:
                check(st == 400 and reason in d.get("error", "") and "keeps serving" in d.get("error", ""),
                      f"load {name}: expected 400 naming '{reason}', got {st} {text}")
        time.sleep(0.4)
        # a loaded machine (the suite runs tests side by side) answers fewer in the same time:
        # the clients go on with the last version until there are enough answers to judge
        deadline = time.time() + 60
        while len(answers) < 100 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)

    # every answer: 200, from a version that served, equal to that version's forward
    bad = []
    seen = set()
    for client, i, st, v, out in answers:
        name = version_ckpt.get(v)
        ok = st == 200 and name is not None and isinstance(out, np.ndarray) and \
            out.shape == ref[name][i].shape and np.allclose(out, ref[name][i], rtol=1e-5, atol=1e-6)
        if ok:
            seen.add(v)
        else:
            bad.append((client, i, st, v, out if not isinstance(out, np.ndarray) else out.ravel()[:3]))
    print(f"{len(answers)} answers under load, from versions {sorted(seen)}; {len(bad)} wrong or failed", flush=True)
    check(not bad, f"{len(bad)} of {len(answers)} answers wrong or failed, e.g. {bad[:3]}")
    check(len(answers) >= 100, f"enough requests under load: {len(answers)}")
    check(len(seen) >= 3, f"answers came from several versions: {sorted(seen)}")

    st, text = request(http_port, "GET", "/v2/models/tiny")
    meta = json.loads(text)
    states = {h["version"]: h["state"] for h in meta.get("version_history", [])}
    check(meta.get("versions") == [str(version)], f"the serving version: {meta.get('versions')}")
    want = {"1": "retired", "2": "retired", "3": "failed", "4": "retired", "5": "failed", "6": "failed",
            str(version): "serving"}
    check(states == want, f"version states {states}, expected {want}")
    failed = [h for h in meta["version_history"] if h["state"] == "failed"]
    check(all(h.get("reason") for h in failed), f"failed versions say why: {failed}")
    # a load of a model that does not exist, and malformed loads
    st, text = request(http_port, "POST", "/v2/repository/models/nope/load", {"parameters": {"checkpoint": ckpt["A"]}})
    check(st == 404, f"load of an unknown model: {st} {text}")
    st, text = request(http_port, "POST", "/v2/repository/models/tiny/load", {"parameters": {"config": "{}"}})
    check(st == 400 and "parameters.config: not taken" in text, f"load with a Triton config: {st} {text}")
    st, text = request(http_port, "POST", "/v2/repository/models/tiny/load", {"parameters": {"checkpoint": 3}})
    check(st == 400 and "parameters.checkpoint: expected a non-empty path, got an integer" in text,
          f"load with a number for a path: {st} {text}")
    # without a checkpoint (as Triton's clients load): the one the model was started with (A), again
    for body in ({"parameters": {}}, None):
        st, text = request(http_port, "POST", "/v2/repository/models/tiny/load", body, timeout=60)
        version += 1
        version_ckpt[version] = "A"
        check(st == 200 and json.loads(text).get("version") == str(version), f"load without a checkpoint: {st} {text}")
    st, text = request(http_port, "GET", "/v2/repository/models/tiny/load")
    check(st == 405, f"GET load: {st}")
    # /v2/models/NAME/versions/V/...: the serving version answers, another is 404
    x = inputs[0]
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    st, text = request(http_port, "POST", f"/v2/models/tiny/versions/{version}/infer", body)
    out = json.loads(text)["outputs"][0] if st == 200 else {}
    check(st == 200 and np.allclose(np.array(out["data"], np.float32).reshape(out["shape"]), ref[version_ckpt[version]][0],
                                    rtol=1e-5, atol=1e-6), f"infer at the serving version: {st} {text[:200]}")
    st, text = request(http_port, "POST", "/v2/models/tiny/versions/1/infer", body)
    check(st == 404 and f"version '1' is not served (version {version} is)" in text, f"infer at a retired version: {st} {text}")
    check(request(http_port, "GET", f"/v2/models/tiny/versions/{version}/ready")[0] == 200, "ready at the serving version")
    return version


# The Lua client's repository calls over ZeroMQ: load(B) -> v, a missing file's reason,
# unload -> v, an infer refused, load(A) -> v + 2 (the failed one numbered too), its answers.
ZMQ_VERSIONS = """
local c = ember.serve.Client{endpoint = arg[1], timeout = 60}
local x = ember.tensor(require('ember.util.json').decode(arg[4]))
local r = {}
r.loaded = c:load('tiny', arg[2])
local ok, err = pcall(c.load, c, 'tiny', arg[2] .. '.missing')
r.missing = ok and 'loaded' or tostring(err)
r.unloaded = c:unload('tiny')
ok, err = pcall(c.infer, c, 'tiny', {x = x})
r.infer_unloaded = ok and 'answered' or tostring(err)
r.again = c:unload('tiny')
r.reloaded = c:load('tiny', arg[3])
r.y = c:infer('tiny', {x = x}).y:totable()
r.answered_by = c:version()
c:load('tiny', arg[2])
r.default = c:load('tiny')
r.y_default = c:infer('tiny', {x = x}).y:totable()
io.write(require('ember.util.json').encode(r))
"""


def unload_and_zmq_loads(http_port, zmq_port, ckpt, inputs, ref, version):
    x = inputs[0]
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    # the repository index: the model READY at its version, a filter, bad requests
    st, text = request(http_port, "POST", "/v2/repository/index")
    check(st == 200 and json.loads(text) == [{"name": "tiny", "version": str(version), "state": "READY"}],
          f"index: {st} {text}")
    st, text = request(http_port, "POST", "/v2/repository/index", {"ready": True})
    check(st == 200 and [m["name"] for m in json.loads(text)] == ["tiny"], f"index of the ready: {st} {text}")
    check(request(http_port, "GET", "/v2/repository/index")[0] == 405, "GET index")
    st, text = request(http_port, "POST", "/v2/repository/index", {"ready": 1})
    check(st == 400 and "repository index: ready: expected true or false" in text, f"index, ready: 1: {st} {text}")
    st, text = request(http_port, "POST", "/v2/repository/index", {"readyy": True})
    check(st == 400 and "unknown field 'readyy'" in text, f"index, unknown field: {st} {text}")
    # HTTP: unload, refused requests, not ready, no serving version; a load brings it back
    st, text = request(http_port, "POST", "/v2/repository/models/tiny/unload")
    check(st == 200 and json.loads(text) == {"model_name": "tiny", "unloaded": str(version)}, f"unload: {st} {text}")
    st, text = request(http_port, "POST", "/v2/models/tiny/infer", body)
    check(st == 503 and "model 'tiny' is unloaded" in text, f"infer after unload: {st} {text}")
    check(request(http_port, "GET", "/v2/models/tiny/ready")[0] == 503, "an unloaded model is not ready")
    meta = json.loads(request(http_port, "GET", "/v2/models/tiny")[1])
    states = {h["version"]: h["state"] for h in meta.get("version_history", [])}
    check(meta.get("versions") == [] and states.get(str(version)) == "unloaded", f"unloaded metadata: {meta}")
    st, text = request(http_port, "POST", "/v2/repository/index")
    check(st == 200 and json.loads(text) == [{"name": "tiny", "version": str(version), "state": "UNAVAILABLE",
                                              "reason": "unloaded"}], f"index after unload: {st} {text}")
    st, text = request(http_port, "POST", "/v2/repository/index", {"ready": True})
    check(st == 200 and json.loads(text) == [], f"index of the ready after unload: {st} {text}")
    check(request(http_port, "GET", "/v2/repository/models/tiny/unload")[0] == 405, "GET unload")
    check(request(http_port, "POST", "/v2/repository/models/nope/unload")[0] == 404, "unload of an unknown model")
    st, text = request(http_port, "POST", "/v2/repository/models/tiny/load", {"parameters": {"checkpoint": ckpt["A"]}},
                       timeout=60)
    version += 1
    check(st == 200 and json.loads(text).get("version") == str(version), f"load after unload: {st} {text}")
    st, text = request(http_port, "POST", "/v2/models/tiny/infer", body)
    out = json.loads(text)["outputs"][0] if st == 200 else {}
    check(st == 200 and np.allclose(np.array(out["data"], np.float32).reshape(out["shape"]), ref["A"][0], rtol=1e-5,
                                    atol=1e-6), f"infer after the reload: {st} {text[:200]}")
    meta = json.loads(request(http_port, "GET", "/v2/models/tiny")[1])
    states = {h["version"]: h["state"] for h in meta.get("version_history", [])}
    check(meta.get("versions") == [str(version)] and states.get(str(version - 1)) == "unloaded",
          f"metadata after the reload: {meta.get('versions')} {states}")
    # ZeroMQ: the same through the Lua client
    r = subprocess.run([EMBER, write("zmq_versions.lua", ZMQ_VERSIONS), f"tcp://127.0.0.1:{zmq_port}", ckpt["B"],
                        ckpt["A"], json.dumps(x.tolist())], capture_output=True, text=True, timeout=120)
    try:
        got = json.loads(r.stdout)
    except ValueError:
        got = {}
    check(r.returncode == 0 and got, f"the ZeroMQ repository calls: {r.returncode} {r.stdout} {r.stderr}")
    if got:
        check(got["loaded"] == version + 1, f"ZeroMQ load: version {got['loaded']}, expected {version + 1}")
        check("answered 400" in got["missing"] and "no such file or directory" in got["missing"],
              f"ZeroMQ load of a missing file: {got['missing']}")
        check(got["unloaded"] == version + 1 and got["again"] == version + 1, f"ZeroMQ unload: {got}")
        check("answered 503" in got["infer_unloaded"] and "is unloaded" in got["infer_unloaded"],
              f"ZeroMQ infer after unload: {got['infer_unloaded']}")
        check(got["reloaded"] == version + 3 and got["answered_by"] == version + 3, f"ZeroMQ reload: {got}")
        check(np.allclose(np.array(got["y"], np.float32), ref["A"][0], rtol=1e-5, atol=1e-6),
              f"the reloaded version's answer: {got['y']}")
        check(got["default"] == version + 5 and np.allclose(np.array(got["y_default"], np.float32), ref["A"][0],
                                                             rtol=1e-5, atol=1e-6),
              f"ZeroMQ load without a checkpoint (A, after B): {got['default']} {got['y_default']}")
    # and the Python client's (examples/serve_client.py)
    c = sc.Client(f"tcp://127.0.0.1:{zmq_port}", timeout=60)
    try:
        v = c.unload("tiny")
        try:
            c.infer("tiny", {"x": x})
            refused = "answered"
        except sc.ServeError as e:
            refused = f"{e.status} {e}"
        v2 = c.load("tiny", ckpt["B"])
        y = c.infer("tiny", {"x": x})["y"]
        check(v2 == v + 1 and c.version == v2 and refused.startswith("503") and np.allclose(y, ref["B"][0], rtol=1e-5,
                                                                                              atol=1e-6),
              f"the Python client's unload {v}, refused '{refused}', load {v2}, answered by {c.version}")
        try:
            c.load("tiny", os.path.join(TMP, "none.safetensors"))
            missing = "loaded"
        except sc.ServeError as e:
            missing = f"{e.status} {e}"
        check(missing.startswith("400") and "no such file or directory" in missing, f"Python load of a missing file: {missing}")
    finally:
        c.close()


if __name__ == "__main__":
    main()
