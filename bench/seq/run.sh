#!/bin/sh
# Attention memory at T (default 1024): ember fused vs materialised, PyTorch default vs
# materialised, each in its own process (peak RSS is per process).
# usage: bench/seq/run.sh [T] [B] [H] [D]   (from the repository root, after the build)
set -e
EMBER=${EMBER:-build/ember}
for mode in fused materialised; do "$EMBER" bench/seq/attention_memory.lua $mode "$@"; done
for mode in default math; do python3 bench/seq/torch_attention_memory.py $mode "$@"; done
# Both character models' training steps, tokens/s, interleaved with PyTorch, 1 and 2 threads
python3 bench/seq/char_models.py 30 3
# LSTM layer forward + backward (char-rnn's shape), interleaved, 1 and 2 threads
for th in 1 2; do
  "$EMBER" bench/seq/lstm_layer.lua 20 50 50 128 $th
  python3 bench/seq/torch_lstm_layer.py 20 50 50 128 $th
done
