#!/usr/bin/env python3
"""Runs every ```lua block of README.md in the ember host: the README's examples must run.

usage: check_readme.py EMBER README.md
Each block runs on its own (`ember -`) in a scratch folder; a block that fails prints its
error and the test fails."""
import re
import subprocess
import sys
import tempfile

ember, readme = sys.argv[1], sys.argv[2]
blocks = re.findall(r"```lua\n(.*?)```", open(readme, encoding="utf-8").read(), re.S)
if not blocks:
    sys.exit("no lua blocks found in " + readme)
failed = 0
with tempfile.TemporaryDirectory() as scratch:
    for i, block in enumerate(blocks, 1):
        p = subprocess.run([ember, "-"], input=block, capture_output=True, text=True, cwd=scratch, timeout=300)
        first = block.strip().splitlines()[0]
        if p.returncode != 0:
            failed += 1
            print(f"FAIL block {i} ({first}):\n{p.stderr[-1500:]}")
        else:
            print(f"ok   block {i} ({first})")
sys.exit(1 if failed else 0)
