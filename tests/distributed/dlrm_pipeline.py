#!/usr/bin/env python3
"""tests/distributed/dlrm_pipeline.py EMBER - pipelines/dlrm_synthetic.yaml with
`distributed: {embeddings: sharded}` (model-parallel tables, the MLPs data-parallel): under
`ember launch -n 2` (with and without shared memory) its metrics equal the replicated run's
and one process's on the global batch (the same test loss and ROC AUC after the same steps);
and it refuses what it cannot do (checkpoints, a model file that ignores the option).
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

code, out, err = run(["launch", "-n", "2", "run", *COMMON, "distributed.embeddings=sharded", "checkpoint.dir=/tmp/x"])
if code == 0 or "sharded tables are not checkpointed yet" not in err + out:
    failures.append(f"sharded with checkpoint.dir: exit {code}, expected a refusal\n{err[-1000:]}")
code, out, err = run(["run", *COMMON, "distributed.embeddings=typo"])
if code == 0 or "distributed.embeddings" not in err:
    failures.append(f"distributed.embeddings=typo: exit {code}, expected an error naming the key\n{err[-1000:]}")

for f in failures:
    print("FAIL", f)
print(f"dlrm_pipeline: {len(runs)} runs compared, {len(failures)} failures")
sys.exit(1 if failures else 0)
