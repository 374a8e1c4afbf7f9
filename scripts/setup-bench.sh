#!/usr/bin/env bash
# Installs the peer side of the benchmarks: PyTorch (and NumPy, and Pillow for the JPEG
# data-loading bench) from PyPI into a virtual environment at .venv-bench/ in the
# repository root.
#
# Idempotent: if the venv already imports torch and PIL, it does nothing.
# Only PyPI is reachable here, so this is the plain PyPI wheel (on x86_64 Linux it carries
# the CUDA libraries as dependencies; the benchmarks use only its CPU path).
#
# Usage: scripts/setup-bench.sh            (venv under .venv-bench/)
#        EMBER_BENCH_PIP_USER=1 scripts/setup-bench.sh   (pip --user into the system python)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-bench"
py="${PYTHON:-python3}"

if [[ "${EMBER_BENCH_PIP_USER:-0}" == 1 ]]; then
    if "$py" -c 'import torch' 2>/dev/null; then
        echo "setup-bench: torch already importable by $py"
    else
        "$py" -m pip install --user torch numpy pillow
    fi
    "$py" -c 'import torch; print("setup-bench: torch", torch.__version__)'
    exit 0
fi

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import torch, PIL' 2>/dev/null; then
    echo "setup-bench: torch already installed in $venv"
else
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install torch numpy pillow
fi
"$venv/bin/python" -c 'import torch; print("setup-bench: torch", torch.__version__)'
