#!/usr/bin/env bash
# The data pipeline's benchmarks, side by side with PyTorch's DataLoader and the machine's
# ceilings (memcpy, ZeroMQ PUSH/PULL). Each round runs every program once, ember and
# PyTorch alternating who goes first so that load from other users falls on both; the
# table gives medians over rounds. Raw lines are kept in $BUILD_DIR/bench-results/data/.
#   bench/data/run.sh                    # 3 rounds, raw and jpeg
#   ROUNDS=5 WHAT=raw bench/data/run.sh  # raw Fashion-MNIST only
#   BATCHES=128 bench/data/run.sh        # raw at batch 128 only
# Environment: BUILD_DIR (default build), PYTHON (a python that imports torch and PIL;
# default .venv-bench/bin/python: scripts/setup-bench.sh, then pip install pillow),
# ROUNDS (3), EPOCHS (timed epochs per configuration, 3), JPEG_EPOCHS (1), WHAT (all),
# BATCHES (batch sizes for raw, "128 1024": per-batch costs weigh less at 1024; jpeg
# runs at 128).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-.venv-bench/bin/python}
ROUNDS=${ROUNDS:-3}
EPOCHS=${EPOCHS:-3}
JPEG_EPOCHS=${JPEG_EPOCHS:-1}
WHAT=${WHAT:-all}
BATCHES=${BATCHES:-128 1024}
out=$BUILD_DIR/bench-results/data
mkdir -p "$out"
cc -O2 bench/data/zmq_ceiling.c -o "$BUILD_DIR/zmq_ceiling" -lzmq -lpthread
results=$out/results-$(date +%Y%m%d-%H%M%S).jsonl
: > "$results"
for ((r = 1; r <= ROUNDS; r++)); do
  echo "round $r/$ROUNDS" >&2
  "$BUILD_DIR/zmq_ceiling" 101376 1 >> "$results"
  for what in raw jpeg; do
    [[ $WHAT == all || $WHAT == "$what" ]] || continue
    epochs=$EPOCHS
    batches=$BATCHES
    [[ $what == jpeg ]] && epochs=$JPEG_EPOCHS && batches=128
    for bs in $batches; do
      ember=("$BUILD_DIR/ember" bench/data/loader_bench.lua "$what" "$epochs" "$bs")
      torch=("$PYTHON" -W ignore bench/data/torch_loader_bench.py "$what" "$epochs" "$bs" 1 2)
      if ((r % 2)); then "${ember[@]}" >> "$results"; "${torch[@]}" >> "$results"
      else "${torch[@]}" >> "$results"; "${ember[@]}" >> "$results"; fi
    done
  done
done
/usr/bin/python3 bench/data/summarise.py "$results"
