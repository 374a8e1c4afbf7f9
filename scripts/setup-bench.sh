#!/usr/bin/env bash
# Installs the peer side of the benchmarks: PyTorch (and NumPy, and Pillow for the JPEG
# data-loading bench; TorchServe, torch-model-archiver and safetensors for bench/serve) from
# PyPI into a virtual environment at .venv-bench/ in the repository root, and the Java
# TorchServe runs on from Debian (openjdk-17-jre-headless). Not part of CI (scripts/setup.sh).
#
# Idempotent: if the venv already imports torch, PIL, ts and safetensors, it does nothing.
# Only PyPI is reachable here, so this is the plain PyPI wheel (on x86_64 Linux it carries
# the CUDA libraries as dependencies; the benchmarks use only its CPU path).
#
# Usage: scripts/setup-bench.sh            (venv under .venv-bench/)
#        EMBER_BENCH_PIP_USER=1 scripts/setup-bench.sh   (pip --user into the system python)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-bench"
py="${PYTHON:-python3}"
pkgs="torch numpy pillow torchserve torch-model-archiver safetensors"

# TorchServe's frontend is Java
if ! command -v java >/dev/null 2>&1; then
    sudo=""
    [[ "$(id -u)" == 0 ]] || sudo=sudo
    $sudo apt-get update
    $sudo apt-get install -y --no-install-recommends openjdk-17-jre-headless
fi

if [[ "${EMBER_BENCH_PIP_USER:-0}" == 1 ]]; then
    if "$py" -c 'import torch, PIL, ts, safetensors' 2>/dev/null; then
        echo "setup-bench: torch and torchserve already importable by $py"
    else
        # shellcheck disable=SC2086
        "$py" -m pip install --user $pkgs
    fi
    "$py" -c 'import torch; print("setup-bench: torch", torch.__version__)'
    exit 0
fi

if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import torch, PIL, ts, safetensors' 2>/dev/null; then
    echo "setup-bench: torch and torchserve already installed in $venv"
else
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install $pkgs
fi
"$venv/bin/python" -c 'import torch; print("setup-bench: torch", torch.__version__)'
