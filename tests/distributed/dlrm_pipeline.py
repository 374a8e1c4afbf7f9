#!/usr/bin/env python3
"""tests/distributed/dlrm_pipeline.py EMBER - pipelines/dlrm_synthetic.yaml with
`distributed: {embeddings: sharded}` (model-parallel tables, the MLPs data-parallel): under
`ember launch -n 2` (with and without shared memory) its metrics equal the replicated run's
and one process's on the global batch (the same test loss and ROC AUC after the same steps);
its checkpoints (a file per rank and a manifest) resume to the numbers of an unbroken run and
are refused at another rank count; and it refuses a key it does not know.
Exits 77 (skipped) without mpirun."""
import json
import os
import shutil
import subprocess
import sys

EMBER = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if not shutil.which(os.environ.get("EMBER_MPIRUN", "mpirun")):
    print("mpirun not found: skipped")
    sys.exit(77)
COMMON = ["pipelines/dlrm_synthetic.yaml", "epochs=1", "data.source_options.num_samples=4096", "log.progress=none"]
failures = []


def run(args, env=None):
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run([EMBER, *args], capture_output=True, text=True, timeout=120, env=full, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr


def result(name, args, env=None):
    code, out, err = run(args, env)
    lines = [l for l in out.splitlines() if l.lstrip("[0] ").startswith("{")]
    if code != 0 or len(lines) != 1:
        failures.append(f"{name}: exit {code}, {len(lines)} result lines\n{out[-2000:]}\n{err[-2000:]}")
        return None
    return json.loads(lines[0][lines[0].index("{"):])


runs = {
    "replicated, 2 ranks": result("replicated", ["launch", "-n", "2", "--threads", "1", "run", *COMMON]),
    "sharded, 2 ranks": result("sharded", ["launch", "-n", "2", "--threads", "1", "run", *COMMON,
                                           "distributed.embeddings=sharded"]),
    "sharded, 2 ranks, no shared memory": result("sharded no shm", ["launch", "-n", "2", "--threads", "1", "run",
                                                                    *COMMON, "distributed.embeddings=sharded"],
                                                 {"EMBER_DIST_SHM": "0"}),
    "one process, the global batch": result("one process", ["run", *COMMON, "data.batch_size=256"]),
}
ref = runs["one process, the global batch"]
for name, r in runs.items():
    if r is None or ref is None:
        continue
    for key in ("test_loss", "test_roc_auc", "test_accuracy"):
        if abs(r[key] - ref[key]) > 1e-5:
            failures.append(f"{name}: {key} {r[key]:.7f}, one process on the global batch {ref[key]:.7f}")
    if "sharded" in name and "replicated, 2 ranks" in runs and runs["replicated, 2 ranks"]:
        rep = runs["replicated, 2 ranks"]
        if abs(r["train_loss"] - rep["train_loss"]) > 1e-5:
            failures.append(f"{name}: train_loss {r['train_loss']:.7f}, replicated {rep['train_loss']:.7f}")

# Sharded checkpoints: one file per rank and a manifest. A run stopped after epoch 1 and
# resumed ends with exactly the numbers of an unbroken 2-epoch run; another number of
# ranks, or a run without sharded tables, is refused with the reason.
import tempfile
ck = tempfile.mkdtemp(prefix="ember-sharded-ck-")
SH = ["launch", "-n", "2", "--threads", "1", "run", *COMMON, "epochs=2", "distributed.embeddings=sharded"]
whole = result("sharded, 2 epochs", [*SH, f"checkpoint.dir={ck}/whole"])
result("sharded, stopped after epoch 1", [*SH, f"checkpoint.dir={ck}/broken", "stop_after_epoch=1"])
resumed = result("sharded, resumed", [*SH, f"checkpoint.dir={ck}/broken", "resume=true"])
if whole and resumed:
    for key in ("train_loss", "test_loss", "test_roc_auc"):
        if whole[key] != resumed[key]:
            failures.append(f"sharded resume: {key} {resumed[key]!r}, the unbroken run {whole[key]!r}")
    if not resumed.get("checkpoint", "").endswith("epoch-0002.shards"):
        failures.append(f"sharded resume: the result names {resumed.get('checkpoint')}, expected the manifest")
files = sorted(os.listdir(f"{ck}/broken"))
want = ["epoch-0001.rank0-of-2.safetensors", "epoch-0001.rank1-of-2.safetensors", "epoch-0001.shards",
        "epoch-0002.rank0-of-2.safetensors", "epoch-0002.rank1-of-2.safetensors", "epoch-0002.shards", "latest"]
if files != want:
    failures.append(f"sharded checkpoint files: {files}, expected {want}")
code, out, err = run(["launch", "-n", "3", "--threads", "1", "run", *COMMON, "epochs=3",
                      "distributed.embeddings=sharded", f"checkpoint.dir={ck}/broken", "resume=true"])
if code == 0 or "sharded over 2 ranks; this run has 3: resume it with 2 ranks" not in err + out:
    failures.append(f"sharded resume at 3 ranks: exit {code}, expected a refusal naming both counts\n{err[-1000:]}")
code, out, err = run(["launch", "-n", "2", "--threads", "1", "run", *COMMON, "epochs=3",
                      f"checkpoint.dir={ck}/broken", "resume=true"])
if code == 0 or "holds model-parallel tables, this run does not" not in err + out:
    failures.append(f"replicated resume of a sharded checkpoint: exit {code}, expected a refusal\n{err[-1000:]}")
shutil.rmtree(ck, ignore_errors=True)
code, out, err = run(["run", *COMMON, "distributed.embeddings=typo"])
if code == 0 or "distributed.embeddings" not in err:
    failures.append(f"distributed.embeddings=typo: exit {code}, expected an error naming the key\n{err[-1000:]}")

for f in failures:
    print("FAIL", f)
print(f"dlrm_pipeline: {len(runs)} runs compared, {len(failures)} failures")
sys.exit(1 if failures else 0)
