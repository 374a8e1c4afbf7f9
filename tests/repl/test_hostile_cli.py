#!/usr/bin/env python3
"""Hostile inputs through the ember executable: each input of the fuzz regression corpus
that is a file of its own (tests/fuzz/regressions/) is loaded by a one-line script, and
pipeline files are checked and run, and every one must end in a clean error: exit status 1
with the file named and ember's message, never a signal, a hang or a sanitizer report.

usage: test_hostile_cli.py path/to/ember
"""
import os
import shutil
import subprocess
import sys
import tempfile

EMBER = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REG = os.path.join(ROOT, "tests", "fuzz", "regressions")
TMP = tempfile.mkdtemp(prefix="ember-hostile-")
failures = []

# harness -> the Lua that loads a file of its corpus (the path is arg[1])
LOADERS = {
    "npy": "require('ember.data').npy.read(arg[1])",
    "idx": "require('ember.data').read_idx(arg[1])",
    "jpeg": "local f = io.open(arg[1], 'rb') local s = f:read('*a') f:close() require('ember.data').jpeg.decode(s)",
    "mtx": "require('ember.graph').load(arg[1], {format = 'mtx', progress = false})",
    "snap": "require('ember.graph').load(arg[1], {format = 'snap', progress = false}):pagerank()",
    "sg": "require('ember.graph').load(arg[1], {format = 'sg', progress = false})",
    "tfrecord": "require('ember.data').source{format = 'tfrecord', files = {arg[1]}}:get(1)",
}
# inputs that are valid files on their own (they load: the fix made them cheap, not errors)
VALID = {("snap", "one_edge_huge_id"), ("mtx", "empty_flush_kept_edges"), ("mtx", "no_edges_kept"),
         ("sg", "no_edges_kept")}


def run(args, timeout=60):
    env = dict(os.environ, EMBER_NUM_THREADS="2")
    try:
        p = subprocess.run([EMBER, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "timed out"
    return p.returncode, p.stdout, p.stderr


def check(name, result, rc, err_has=()):
    code, out, err = result
    problems = []
    if code != rc:
        problems.append(f"exit status {code}, expected {rc}")
    for s in err_has:
        if s not in err:
            problems.append(f"stderr lacks {s!r}")
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation"):
        if bad in err:
            problems.append(f"stderr has {bad!r}")
    if problems:
        failures.append(name)
        print(f"FAIL {name}: " + "; ".join(problems) + f"\n--- stderr\n{err[-2000:]}")
    else:
        print(f"ok   {name}")


for harness, lua in sorted(LOADERS.items()):
    folder = os.path.join(REG, harness)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(TMP, harness + "_" + name)
        shutil.copy(os.path.join(folder, name), path)
        script = os.path.join(TMP, "load.lua")
        with open(script, "w") as f:
            f.write("local ember = require 'ember'\n" + lua + "\n")
        valid = (harness, name) in VALID
        named = "jpeg.decode" if harness == "jpeg" else os.path.basename(path)  # bytes in memory have no file name
        check(f"{harness}/{name}", run([script, path]), 0 if valid else 1, () if valid else (named,))

laughs = os.path.join(REG, "yaml", "billion_laughs")
check("run --check: billion laughs (a configuration error: status 2)", run(["run", laughs, "--check"], timeout=30), 2,
      ("billion_laughs:1:", "alias uses"))
huge = os.path.join(TMP, "rows.mtx")
shutil.copy(os.path.join(REG, "mtx", "rows_4e9"), huge)
check("run: a pagerank job on a Matrix Market file of 4e9 rows",
      run(["run", "pipelines/pagerank_file.yaml", f"graph.input.path={huge}", "graph.input.format=mtx"]), 1,
      ("rows.mtx:2:", "declares 4000000000 vertices"))

shutil.rmtree(TMP, ignore_errors=True)
if failures:
    print(f"\n{len(failures)} failure(s)")
    sys.exit(1)
print("\nall hostile-input checks passed")
