#!/usr/bin/env python3
"""tests/distributed/gloo_failures.py EMBER - the Gloo backend (torchrun-style starts) never hangs and
always says why:
  - a rank killed mid-step (stuck.lua kill): its watcher sees its process gone and ends the job
    (status 124) within seconds, long before the 30 s timeout; with buckets through Gloo the
    connection failure says the same;
  - a rank stopped (SIGSTOP) or busy outside collectives: rank 0 times out after 3 s naming
    rank 1 and why; with buckets in shared memory and through Gloo (EMBER_DIST_SHM=0);
  - mismatched calls (other kinds, sizes or dtypes; all_to_all_v counts that disagree): an
    error on every rank, and the group goes on working;
  - start-up: WORLD_SIZE that differs between ranks, a rank that never comes, no rank 0 at
    MASTER_ADDR:MASTER_PORT, a RANK given twice, a RANK outside [0, WORLD_SIZE), the removed
    backend names 'tcp' and 'zmq'.
Exits 77 (skipped) when ember was built without Gloo."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchrun import launch as launch_raw  # noqa: E402
from expect import expect, failures  # noqa: E402

EMBER = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
STUCK, HELLO = os.path.join(HERE, "stuck.lua"), os.path.join(HERE, "gloo_hello.lua")
MISMATCH = os.path.join(HERE, "mismatch.lua")


def launch(*args, **kw):
    codes, out, seconds = launch_raw(*args, **kw)
    # the time waited is printed with %.3g: 3.01 s on a loaded machine is a timeout of 3 s
    return codes, re.sub(r"timed out after (\d+)\.\d+ s", r"timed out after \1 s", out), seconds


probe = launch(EMBER, 1, HELLO, env={"EMBER_DIST_TIMEOUT": "5"})
if "the Gloo backend is not available" in probe[1]:
    print("ember built without Gloo: skipped")
    sys.exit(77)


def stuck(mode, timeout, **env):
    # A stopped rank cannot end: it is killed 1 s after rank 0 has ended (grace). A killed
    # rank fails first, and rank 0 then has seconds to notice.
    grace = 8.0 if mode == "kill" else 1.0
    return launch(EMBER, 2, STUCK, [mode], env=dict(EMBER_DIST_TIMEOUT=str(timeout), **env), grace=grace)


expect("the sanity run: one rank", probe, statuses={0: 0}, has=("rank 0 of 1: backend gloo, all_reduce ok",))
expect("two ranks", launch(EMBER, 2, HELLO), statuses={0: 0, 1: 0}, has=("[1] rank 1 of 2: backend gloo",))
expect("three ranks", launch(EMBER, 3, HELLO), statuses={0: 0, 1: 0, 2: 0}, has=("[2] rank 2 of 3: backend gloo",))

# The bucket allreduce of step 3 is collective #12 (see timeout.py); #8 without shared memory.
gone = "its process "
expect("a killed rank, buckets in shared memory", stuck("kill", 30), statuses={0: 124},
       has=("[0] ember.dist: rank 0 lost rank 1 (its process ", "on this host is gone: killed or crashed)",
            "while collective #12 on the world group is in progress", "aborting the job"),
       lacks=("finished: that is wrong",), within=12)
# (usually inside all_reduce #8, whose connection fails; on a slow run rank 0's watcher can
# notice the loss between collectives, and says so instead)
expect("a killed rank, buckets through Gloo", stuck("kill", 30, EMBER_DIST_SHM="0"), statuses={0: 124},
       has=("on this host is gone: killed or crashed", "aborting the job"),
       lacks=("finished: that is wrong",), within=12)
timeout_msg = "[0] ember.dist: all_reduce #12 on the world group (712 B of float32): timed out after 3 s on rank 0"
expect("a stopped rank", stuck("stop", 3), statuses={0: 124},
       has=(timeout_msg, "waiting for rank 1 (no answer: dead, stopped or hung; its process ",
            "on this host is stopped (SIGSTOP or a debugger)); aborting the job"),
       lacks=("finished: that is wrong",))
expect("a stopped rank, buckets through Gloo", stuck("stop", 3, EMBER_DIST_SHM="0"), statuses={0: 124},
       has=("on the world group (712 B of float32): timed out after 3 s",
            "waiting for rank 1 (no answer: dead, stopped or hung; its process "),
       lacks=("finished: that is wrong",))
expect("a rank busy outside collectives: the job ends on every rank", stuck("busy", 3), statuses={0: 124, 1: 124},
       has=(timeout_msg, "waiting for rank 1 (alive, but has not reached it: its last collective on this group is #11)",
            "[1] ember.dist: rank 0 ended the job (exit status 124): all_reduce #12"),
       lacks=("finished: that is wrong",))

for n in (2, 3):
    expect(f"mismatched calls are an error on every rank ({n} ranks)", launch(EMBER, n, MISMATCH),
           statuses={r: 0 for r in range(n)}, has=tuple(f"[{r}] mismatch: ok" for r in range(n)))

expect("WORLD_SIZE differs", launch(EMBER, 2, HELLO, rank_env=lambda r: {"WORLD_SIZE": "3"} if r == 1 else {}),
       statuses={0: 1, 1: 1},
       has=("[0] ember: ", "[1] ember: ", "dist.init: WORLD_SIZE differs between ranks: rank 0 (pid ",
            ") has WORLD_SIZE=2, rank 1 (pid ", ") has WORLD_SIZE=3"))
expect("a rank that never comes", launch(EMBER, 3, HELLO, ranks=[0, 1], env={"EMBER_DIST_TIMEOUT": "2"}),
       statuses={0: 1, 1: 1},
       has=("[0] ember: ", "[1] ember: ", "timed out after 2 s: 2 of WORLD_SIZE=3 ranks came; missing rank 2 "))
expect("no rank 0 at MASTER_ADDR:MASTER_PORT", launch(EMBER, 2, HELLO, ranks=[1], env={"EMBER_DIST_TIMEOUT": "2"}),
       statuses={0: 1}, has=("dist.init: rank 1 could not reach rank 0's store at MASTER_ADDR:MASTER_PORT = 127.0.0.1:",
                            "within 2 s (is rank 0 running?"))
expect("a RANK given twice", launch(EMBER, 3, HELLO, ranks=[0, 1, 1], env={"EMBER_DIST_TIMEOUT": "10"}),
       statuses={0: 1, 1: 1, 2: 1}, has=("dist.init: RANK=1 is claimed by two processes: pid ",), within=8)
expect("RANK outside [0, WORLD_SIZE)", launch(EMBER, 2, HELLO, ranks=[2]), statuses={0: 1},
       has=("dist.init: RANK=2 is outside [0, WORLD_SIZE=2)",))
for name in ("tcp", "zmq"):
    expect(f"backend '{name}' names its replacement", launch(EMBER, 1, HELLO, env={"EMBER_TEST_BACKEND": name}),
           statuses={0: 1}, has=(f"dist.init: backend '{name}' is gone", "run on 'gloo' now"))
sys.exit(1 if failures else 0)
