#!/usr/bin/env python3
"""tests/distributed/launch.py EMBER - `ember launch`: rank-prefixed output, thread counts, a failing
rank stops every rank and gives its exit status, usage errors, and a Fashion-MNIST pipeline
under `ember launch -n 2 run` (when Debian's dataset-fashion-mnist is installed). Exits 77
(skipped) without mpirun."""
import json
import os
import shutil
import subprocess
import sys
import time

EMBER = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROBE = os.path.join(HERE, "launch_probe.lua")
if not shutil.which(os.environ.get("EMBER_MPIRUN", "mpirun")):
    print("mpirun not found: skipped")
    sys.exit(77)

failures = []


def run(*args, env=None):
    full = dict(os.environ)
    full.pop("EMBER_NUM_THREADS", None)
    full.update(env or {})
    t0 = time.monotonic()
    p = subprocess.run([EMBER, "launch", *args], capture_output=True, text=True, timeout=120, env=full, cwd=ROOT)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def expect(name, result, status, out_has=(), err_has=(), out_lacks=(), within=30.0, check=None):
    code, out, err, seconds = result
    problems = []
    if code != status:
        problems.append(f"exit status {code}, expected {status}")
    problems += [f"stdout lacks {s!r}" for s in out_has if s not in out]
    problems += [f"stderr lacks {s!r}" for s in err_has if s not in err]
    problems += [f"stdout has {s!r}" for s in out_lacks if s in out]
    if seconds > within:
        problems.append(f"took {seconds:.1f} s, expected under {within} s")
    if check and not problems:
        problems += check(out, err)
    print(f"{'ok  ' if not problems else 'FAIL'} {name} ({seconds:.1f} s)")
    if problems:
        failures.append(name)
        print("  " + "\n  ".join(problems) + f"\n--- stdout\n{out}--- stderr\n{err}")


cores = os.cpu_count() or 1
threads = max(1, cores // 2)
expect("prefixed lines, joined pieces, threads = cores / N", run("-n", "2", PROBE, "print"), 0,
       out_has=(f"[0] rank 0 of 2 starts and ends its line; threads {threads}; launcher openmpi\n",
                f"[1] rank 1 of 2 starts and ends its line; threads {threads}; launcher openmpi\n"),
       err_has=("[0] stderr of rank 0\n", "[1] stderr of rank 1\n"))
# without prefixes the ranks' half lines may interleave: only whole pieces are checked
expect("--threads and --no-prefix", run("-n", "2", "--threads", "3", "--no-prefix", PROBE, "print"), 0,
       out_has=("rank 1 of 2 starts", " and ends its line; threads 3; launcher openmpi"), out_lacks=("[1] ",))
expect("EMBER_NUM_THREADS wins", run("-n", "3", PROBE, "print", env={"EMBER_NUM_THREADS": "2"}), 0,
       out_has=("[2] rank 2 of 3 starts and ends its line; threads 2",))
expect("a rank exiting with 3 stops the job with status 3", run("-n", "2", PROBE, "exit3"), 3, within=15)
expect("a Lua error on one rank stops the job", run("-n", "2", PROBE, "error"), 1,
       err_has=("[1] ember: ", "boom on rank 1"), within=15)
expect("-n is required", run(PROBE), 2, err_has=("ember launch: -n N is required",))
expect("-n 0", run("-n", "0", PROBE), 2, err_has=("expected a number of processes from 1 to 4096, got '0'",))
expect("unknown option", run("-n", "2", "--bogus", PROBE), 2, err_has=("unknown option '--bogus'",))
expect("no script", run("-n", "2"), 2, err_has=("expected a script",))
expect("--help", run("--help"), 0, out_has=("usage: ember launch -n N", "run PIPELINE.yaml", "srun"))
expect("--dry-run", run("-n", "4", "--dry-run", "x.lua", "a"), 0,
       out_has=("mpirun -np 4 --oversubscribe --bind-to none", "--tag-output", "x.lua a"))

if os.path.exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"):
    def one_result(out, err):
        lines = [l for l in out.splitlines() if l.startswith("[0] {")]
        others = [l for l in out.splitlines() if l.startswith("[1] {")]
        if len(lines) != 1 or others:
            return [f"expected one result line from rank 0, got {lines + others}"]
        r = json.loads(lines[0][4:])
        return [] if r.get("job") == "train" and r.get("epochs") == 1 else [f"unexpected result {r}"]
    expect("ember launch -n 2 run pipelines/fashion_mnist_mlp.yaml",
           run("-n", "2", "run", "pipelines/fashion_mnist_mlp.yaml", "epochs=1", "data.limit=2048",
               "data.test_limit=500", "checkpoint.dir=null", "log.dir=null", "log.progress=none",
               "distributed.bucket_cap_mb=0.5"), 0,
           err_has=("[0] distributed: 2 ranks (mpi), 256 samples per step",), check=one_result, within=60)
else:
    print("skip the pipeline run: /usr/share/datasets/fashion-mnist is not installed")
sys.exit(1 if failures else 0)
