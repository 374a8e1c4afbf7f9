#!/bin/sh
# Installs the Debian packages ember needs (only the missing ones) and builds it into
# build/. Safe to run again: it does nothing that is already done.
#   scripts/setup.sh            install + release build
#   BUILD_DIR=dir CMAKE_ARGS='-DEMBER_SANITIZE=ON' scripts/setup.sh
set -eu
cd "$(dirname "$0")/.."

PACKAGES="build-essential cmake pkg-config git
luajit libluajit-5.1-dev libopenblas-openmp-dev libzmq3-dev libyaml-dev
libopenmpi-dev openmpi-bin libreadline-dev libturbojpeg0-dev
libcmocka-dev lua-busted lua-check tmux python3 python3-numpy python3-networkx python3-igraph
python3-scipy dataset-fashion-mnist zlib1g-dev
clang libclang-rt-dev libomp-dev
libssl-dev libcairo2-dev fonts-dejavu-core python3-pip"

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

# PyPI packages of the tests: Jupyter's clients drive `ember kernel` (tests/jupyter).
PIP_PACKAGES="jupyter_client nbclient nbformat nbconvert"
if ! python3 -c 'import jupyter_client, nbclient, nbformat, nbconvert' 2>/dev/null; then
  echo "setup: pip install $PIP_PACKAGES"
  # shellcheck disable=SC2086
  python3 -m pip install -q $PIP_PACKAGES 2>/dev/null \
    || python3 -m pip install -q --user --break-system-packages $PIP_PACKAGES
fi

BUILD_DIR=${BUILD_DIR:-build}
JOBS=$(nproc 2>/dev/null || echo 2)
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$JOBS"
