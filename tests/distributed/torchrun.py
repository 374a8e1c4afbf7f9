#!/usr/bin/env python3
"""tests/distributed/torchrun.py EMBER NP SCRIPT [ARGS...] - runs SCRIPT on NP local ember processes
started torchrun-style, as torchrun would (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port; no MPI, no agent store: rank 0 hosts the c10d
store), so that dist.init picks Gloo. Output lines are prefixed with the rank. Exits with the first
failing rank's status (the others are stopped), 0 when every rank succeeds. Also a module:
gloo_failures.py uses launch(). real_torchrun.py runs PyTorch's own torchrun."""
import os
import socket
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(ember, np, script, args=(), env=None, rank_env=None, ranks=None, timeout=120, port=None, grace=15.0):
    """Starts ranks (default 0..np-1) of a world of np; returns (statuses by rank, output, seconds).
    rank_env(r) gives extra variables for rank r. When one rank fails, the others get `grace`
    seconds to end on their own (they must: that is what the failure tests check), then are
    killed (status -9)."""
    port = port or free_port()
    ranks = list(range(np)) if ranks is None else ranks
    procs, lines, lock = [], [], threading.Lock()

    def pump(r, stream):
        for line in stream:
            with lock:
                lines.append(f"[{r}] {line.rstrip()}")

    t0 = time.monotonic()
    for i, r in enumerate(ranks):
        e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(np), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(np),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), EMBER_NUM_THREADS="1")
        for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID"):
            e.pop(k, None)
        e.update(env or {})
        e.update((rank_env or (lambda _: {}))(r))
        p = subprocess.Popen([ember, script, *args], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        threading.Thread(target=pump, args=(i if ranks == list(range(np)) else r, p.stdout), daemon=True).start()
        procs.append(p)
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        now = time.monotonic()
        if all(c is not None for c in codes):
            break
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if now - t0 > timeout or (failed_at is not None and now - failed_at > grace):
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.02)
    for p in procs:
        p.wait()
    time.sleep(0.05)   # the pumps read the last lines
    with lock:
        out = "\n".join(lines)
    return [p.returncode for p in procs], out, time.monotonic() - t0


if __name__ == "__main__":
    ember, np, script = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    codes, out, seconds = launch(ember, np, script, sys.argv[4:])
    print(out)
    print(f"{np} ranks, torchrun-style: exit statuses {codes} in {seconds:.1f} s")
    bad = [c for c in codes if c != 0]
    sys.exit(0 if not bad else (bad[0] if 0 < bad[0] < 256 else 1))
