#!/bin/sh
# bench/serve/run.sh - `ember serve` under open-loop Poisson load (bench/serve/loadgen.c):
# the Fashion-MNIST MLP (pipelines/serve_fmnist_mlp.yaml) at batch delays of 0, 0.5 and 2 ms,
# one JSON line each (p50/p90/p99/p99.9 latency, achieved rate).
#   bench/serve/run.sh [RATE_PER_S=200] [SECONDS=3] [WORKERS=2]
# Needs a checkpoint in runs/fashion_mnist_mlp/checkpoints (ember run
# pipelines/fashion_mnist_mlp.yaml); trains one short epoch first when there is none.
# Run from the repository root with the build in build/ (EMBER=... to use another).
set -eu
RATE=${1:-200}
SECONDS_=${2:-3}
WORKERS=${3:-2}
EMBER=${EMBER:-build/ember}
OUT=${OUT:-build/bench-serve}
mkdir -p "$OUT"
cc -O2 -pthread bench/serve/loadgen.c -o "$OUT/loadgen" -lm
if [ ! -f runs/fashion_mnist_mlp/checkpoints/latest ]; then
  echo "bench/serve: no checkpoint yet: training one short epoch" >&2
  "$EMBER" run pipelines/fashion_mnist_mlp.yaml epochs=1 data.workers=0 log.progress=none >/dev/null
fi
# one test image, normalised as in training
python3 - "$OUT/body.json" <<'PY'
import gzip, json, sys
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 784]
data = [(b / 255 - 0.2860) / 0.3530 for b in raw]
json.dump({"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": data}]},
          open(sys.argv[1], "w"))
PY
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for DELAY in 0 500 2000; do
  "$EMBER" serve pipelines/serve_fmnist_mlp.yaml http.port="$PORT" models.1.workers="$WORKERS" \
    models.1.batching.max_delay_us="$DELAY" >"$OUT/serve.out" 2>"$OUT/serve.err" &
  PID=$!
  i=0
  until curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 300 ] || { cat "$OUT/serve.err" >&2; kill "$PID"; exit 1; }
    sleep 0.1
  done
  printf '{"server":"ember","model":"fmnist_mlp","max_delay_us":%s,"workers":%s,"result":' "$DELAY" "$WORKERS"
  "$OUT/loadgen" 127.0.0.1 "$PORT" /v2/models/fmnist_mlp/infer "$OUT/body.json" "$RATE" "$SECONDS_" 64 1 | tr -d '\n'
  curl -s "http://127.0.0.1:$PORT/metrics" | awk '/^ember_serve_batch_size_(sum|count)/ {v[$1]=$2} END {
    for (k in v) if (k ~ /sum/) s=v[k]; else c=v[k]; printf ",\"mean_batch_rows\":%.2f}\n", (c ? s / c : 0) }'
  kill -TERM "$PID"
  wait "$PID"
done
