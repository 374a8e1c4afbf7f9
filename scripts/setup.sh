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
libcmocka-dev libmicrohttpd-dev libjansson-dev curl lua-busted lua-check tmux python3 python3-numpy python3-networkx python3-igraph
python3-scipy python3-pip python3-zmq dataset-fashion-mnist fortunes zlib1g-dev
clang libclang-rt-dev libomp-dev libdnnl-dev
libssl-dev libcairo2-dev fonts-dejavu-core"

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

# From PyPI, for the tests that check ember's files and protocols with the real tools:
# PyTorch (loads ember's checkpoints; its torchrun launches ember and its TCPStore talks to
# ember's), safetensors, TensorBoard's event reader, Jupyter's clients (drive `ember kernel`,
# tests/jupyter). EMBER_SKIP_PIP=1 leaves them out.
# Installed for the python3 on PATH when missing (Debian's own python3 needs
# --break-system-packages); a test whose package is missing says so and is skipped.
pip_missing=""
[ "${EMBER_SKIP_PIP:-0}" = 1 ] ||
for m in torch safetensors tensorboard jupyter_client nbclient nbformat nbconvert; do
  python3 -c "import $m" 2>/dev/null || pip_missing="$pip_missing $m"
done
if [ -n "$pip_missing" ]; then
  echo "setup: pip installing$pip_missing"
  # shellcheck disable=SC2086
  python3 -m pip install --quiet $pip_missing 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages $pip_missing ||
    echo "setup: could not install$pip_missing from PyPI: the tests that need them will be skipped"
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS"
