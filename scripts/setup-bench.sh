#!/bin/sh
# scripts/setup-bench.sh - what the side-by-side benchmarks need beyond CI's scripts/setup.sh:
# TorchServe (PyPI torchserve + torch-model-archiver) and the Java it runs on (Debian
# openjdk-17-jre-headless), for bench/serve/compare.sh. PyTorch itself comes from setup.sh.
#   scripts/setup-bench.sh          (root, or sudo for apt)
set -eu
if ! command -v java >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends openjdk-17-jre-headless
fi
missing=""
command -v torchserve >/dev/null 2>&1 || missing="$missing torchserve"
command -v torch-model-archiver >/dev/null 2>&1 || missing="$missing torch-model-archiver"
python3 -c "import torch" 2>/dev/null || missing="$missing torch"
if [ -n "$missing" ]; then
  echo "setup-bench: pip installing$missing"
  # shellcheck disable=SC2086
  python3 -m pip install --quiet $missing 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages $missing
fi
java -version 2>&1 | head -1
torchserve --version 2>/dev/null || python3 -c "import ts; print('torchserve', ts.__version__)"
