#!/bin/sh
# Installs the Debian packages ember needs (only the missing ones) and builds it into
# build/. Safe to run again: it does nothing that is already done.
#   scripts/setup.sh            install + release build
#   BUILD_DIR=dir CMAKE_ARGS='-DEMBER_SANITIZE=ON' scripts/setup.sh
set -eu
cd "$(dirname "$0")/.."

PACKAGES="build-essential cmake pkg-config git
luajit libluajit-5.1-dev libopenblas-openmp-dev libzmq3-dev libyaml-dev
libopenmpi-dev openmpi-bin libgloo-dev libreadline-dev libturbojpeg0-dev
libcmocka-dev lua-busted lua-check tmux python3 python3-numpy python3-networkx python3-igraph
python3-scipy dataset-fashion-mnist zlib1g-dev
clang libclang-rt-dev libomp-dev"

missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# PyPI: PyTorch, whose torchrun launches ember in tests/distributed/real_torchrun.py and whose
# TCPStore talks to ember's in store_interop.py (both skipped without it). EMBER_SKIP_PIP=1
# leaves it out. Debian's Python refuses pip outside a venv unless told otherwise.
if [ "${EMBER_SKIP_PIP:-0}" != 1 ] && ! python3 -c 'import torch' 2>/dev/null; then
  echo "setup: installing torch (PyPI)"
  python3 -m pip install -q torch 2>/dev/null || python3 -m pip install -q --break-system-packages torch \
    || echo "setup: pip install torch failed: the torchrun and TCPStore interop tests will be skipped"
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS"
