#!/usr/bin/env python3
"""tests/distributed/real_torchrun.py EMBER - PyTorch's own launcher starts ember:
    torchrun --nproc-per-node N --master-port P --no-python EMBER SCRIPT
at N = 2 and 4 for the collectives and DDP (parity with one process) scripts. torchrun's agent
hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True:
the ranks join it (they must not bind the port) and run on Gloo. Also a rank killed under
torchrun: the others end with a clear message and torchrun reports the failure; and the PageRank
job (`run pipelines/pagerank_kron.yaml`) on 2 ranks, against one process. Exits 77
(skipped) when torchrun is not installed."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from expect import expect, failures  # noqa: E402

EMBER = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = shutil.which("torchrun")
if not TORCHRUN:
    print("torchrun not found (pip install torch): skipped")
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env(extra=None):
    """This environment without what would make ember think a launcher already started it."""
    e = dict(os.environ, EMBER_NUM_THREADS="1", **(extra or {}))
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        e.pop(k, None)
    return e


def torchrun(n, script, *args, env=None, timeout=240):
    cmd = [TORCHRUN, "--nproc-per-node", str(n), "--master-port", str(free_port()), "--no-python", EMBER,
           os.path.join(HERE, script), *args]
    e = launch_env(env)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)
    out = re.sub(r"timed out after (\d+)\.\d+ s", r"timed out after \1 s", p.stdout + p.stderr)
    return p.returncode, out, time.monotonic() - t0


for n in (2, 4):
    expect(f"collectives on {n} ranks", torchrun(n, "collectives.lua"), status=0,
           has=(f"collectives: ", f"checks passed on each of {n} ranks"), lacks=("Address already in use",), within=120)
    expect(f"DDP on {n} ranks (parity with one process)", torchrun(n, "ddp.lua"), status=0,
           has=(f"checks passed on each of {n} ranks",), within=120)
# torchrun's agent sees a killed worker itself and stops the others at once
expect("a rank killed under torchrun", torchrun(2, "stuck.lua", "kill", env={"EMBER_DIST_TIMEOUT": "30"}),
       status=1, has=("rank      : 1 (local_rank: 1)", "exitcode  : -9"), lacks=("finished: that is wrong",), within=25)
# a stopped worker it does not see: rank 0 times out, names rank 1, and the job ends
expect("a rank stopped under torchrun", torchrun(2, "stuck.lua", "stop", env={"EMBER_DIST_TIMEOUT": "3"}),
       status=1, has=("all_reduce #12 on the world group (712 B of float32): timed out after 3 s on rank 0",
                      "waiting for rank 1 (no answer: dead, stopped or hung; its process ", "exitcode  : 124"),
       lacks=("finished: that is wrong",), within=60)

# The PageRank job as one job under torchrun (`run pipelines/...` instead of a script): rank 0
# alone prints the JSON line, the graph is partitioned over the Gloo group, and the scores are
# the single process's to float32 rounding (the job's L1 bound is 1e-6).
JOB = os.path.join(os.path.dirname(os.path.dirname(HERE)), "pipelines", "pagerank_kron.yaml")
KEYS = ["graph.generate.scale=12", "pagerank.tol=0", "pagerank.max_iter=15", "threads=1"]


def pagerank_scores(out_tsv, *launcher):
    cmd = [*launcher, EMBER, "run", JOB, *KEYS, f"output.scores={out_tsv}"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=launch_env())
    scores = {}
    if p.returncode == 0 and os.path.exists(out_tsv):
        for line in open(out_tsv):
            if line[:1].isdigit():
                v, x = line.split()[:2]
                scores[int(v)] = float(x)
    return (p.returncode, p.stdout + p.stderr, time.monotonic() - t0), p.stdout, scores


tmp = os.environ.get("TMPDIR", "/tmp")
solo_tsv = os.path.join(tmp, f"ember_torchrun_pr_solo_{os.getpid()}.tsv")
dist_tsv = os.path.join(tmp, f"ember_torchrun_pr_dist_{os.getpid()}.tsv")
_, _, solo = pagerank_scores(solo_tsv)
result, stdout, dist = pagerank_scores(
    dist_tsv, TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), "--no-python")
json_lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
l1 = sum(abs(dist.get(v, 0.0) - x) for v, x in solo.items()) if solo else float("inf")
expect("the PageRank job on 2 ranks under torchrun", result, status=0,
       has=("distributed: 2 ranks (gloo), the graph partitioned", "engine\":\"cpu:partitioned"), within=60)
if len(json_lines) != 1 or len(solo) != 4096 or len(dist) != 4096 or l1 > 1e-6:
    failures.append("PageRank under torchrun against one process")
    print(f"FAIL PageRank under torchrun: {len(json_lines)} JSON lines (expected 1), {len(solo)} and {len(dist)} "
          f"scores (expected 4096 each), L1 distance {l1:.3g} (expected <= 1e-6)")
else:
    print(f"ok   PageRank under torchrun: one JSON line, L1 distance to one process {l1:.3g}")
for f in (solo_tsv, dist_tsv):
    if os.path.exists(f):
        os.remove(f)
sys.exit(1 if failures else 0)
