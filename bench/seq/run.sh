#!/bin/sh
# Attention memory at T (default 1024): ember fused vs materialised, PyTorch default vs
# materialised, each in its own process (peak RSS is per process).
# usage: bench/seq/run.sh [T] [B] [H] [D]   (from the repository root, after the build)
set -e
EMBER=${EMBER:-build/ember}
for mode in fused materialised; do "$EMBER" bench/seq/attention_memory.lua $mode "$@"; done
for mode in default math; do python3 bench/seq/torch_attention_memory.py $mode "$@"; done
