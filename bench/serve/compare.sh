#!/bin/sh
# bench/serve/compare.sh - ember serve against TorchServe, side by side in one run: the
# Fashion-MNIST MLP and CNN, the same weights (TorchServe's exported from ember's checkpoint
# by bench/serve/torchserve_export.py, checked to give ember's logits), the same KServe v2
# JSON body (one image), both driven by the open-loop Poisson load generator
# (bench/serve/loadgen.c), at batch delays of 0, 0.5 and 2 ms (TorchServe's max_batch_delay
# is whole milliseconds: 0.5 ms runs as 1 ms there). For each server, model and delay:
#   - latency (p50/p99/p99.9) and throughput at RATE requests/s;
#   - the sustainable rate ("max_ok_per_s"): the highest rate whose p99 stays <= 10 ms with
#     every request answered and >= 90% of the offered rate achieved, found by a doubling
#     ladder (from LADDER_START, 25/s) up to the first rate that fails, then BISECT (3) halvings
#     of the gap between the last rate that held and that one (to within 1/8 of the gap).
# Each server gets a warm-up load (half of SECONDS at RATE, not counted) after it starts.
# The two servers run one after the other for each configuration (interleaved), with the same
# resources: 2 workers of 1 thread each, max batch 64, 2 HTTP threads (ember) / Netty's
# default (TorchServe). One JSON line per measurement, then a summary table.
#   scripts/setup-bench.sh                       # once: PyTorch, TorchServe (.venv-bench/), Java
#   bench/serve/compare.sh [RATE=200] [SECONDS=2] [MAX_RATE=12800]   (LADDER_START=25, BISECT=3)
# Filters (environment): MODELS="mlp cnn", DELAYS="0 500 2000" (microseconds),
# SERVERS="ember torchserve", POLICIES (ember's batching.policy; unset: the job's default;
# several, e.g. "deadline spare", run one after the other, labelled ember:POLICY).
# Needs checkpoints in runs/fashion_mnist_{mlp,cnn}/checkpoints; trains a short one (2000
# images, one epoch) for a model that has none. Run from the repository root (EMBER=... for
# another build). Output: build/bench-serve/compare.jsonl.
set -eu
RATE=${1:-200}
SECONDS_=${2:-2}
MAX_RATE=${3:-12800}
LADDER_START=${LADDER_START:-25}
BISECT=${BISECT:-3}
MODELS=${MODELS:-mlp cnn}
DELAYS=${DELAYS:-0 500 2000}
SERVERS=${SERVERS:-ember torchserve}
POLICIES=${POLICIES:-}
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; } # LIST WORD
EMBER=${EMBER:-build/ember}
OUT=${OUT:-build/bench-serve}
mkdir -p "$OUT"
RESULTS="$OUT/compare.jsonl"
: >"$RESULTS"
cc -O2 -pthread bench/serve/loadgen.c -o "$OUT/loadgen" -lm
# TorchServe, torch and torch-model-archiver from scripts/setup-bench.sh's venv when there is one
[ -x .venv-bench/bin/torchserve ] && PATH="$PWD/.venv-bench/bin:$PATH"
if has "$SERVERS" torchserve; then
  command -v torchserve >/dev/null || { echo "compare.sh: no torchserve: run scripts/setup-bench.sh" >&2; exit 1; }
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() { # URL PID LOG
  i=0
  until curl -sf "$1" >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -ge 600 ] || ! kill -0 "$2" 2>/dev/null; then echo "compare.sh: $1 never answered" >&2; tail -20 "$3" >&2; exit 1; fi
    sleep 0.1
  done
}

python3 - "$OUT/body.json" <<'PY'
import gzip, json, sys
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 784]
data = [(b / 255 - 0.2860) / 0.3530 for b in raw]
json.dump({"inputs": [{"name": "input", "shape": [1, 1, 28, 28], "datatype": "FP32", "data": data}]},
          open(sys.argv[1], "w"))
PY

# ---- checkpoints, the TorchServe archives
STORE="$OUT/model-store"
mkdir -p "$STORE"
for KIND in $MODELS; do
  if [ ! -f "runs/fashion_mnist_$KIND/checkpoints/latest" ]; then
    echo "compare.sh: no $KIND checkpoint yet: training one short epoch (2000 images)" >&2
    "$EMBER" run "pipelines/fashion_mnist_$KIND.yaml" epochs=1 data.limit=2000 data.test_limit=1000 data.workers=0 \
      log.progress=none >/dev/null
  fi
  if has "$SERVERS" torchserve; then
    python3 bench/serve/torchserve_export.py "runs/fashion_mnist_$KIND/checkpoints" "$KIND" "$STORE" >"$OUT/export-$KIND.log"
  fi
done

# ---- TorchServe: one instance for the whole run; each configuration registers its model
if has "$SERVERS" torchserve; then
TS_PORT=$(free_port); TS_MPORT=$(free_port); TS_METRICS=$(free_port)
cat >"$OUT/ts.properties" <<EOF
inference_address=http://127.0.0.1:$TS_PORT
management_address=http://127.0.0.1:$TS_MPORT
metrics_address=http://127.0.0.1:$TS_METRICS
model_store=$STORE
disable_token_authorization=true
enable_model_api=true
default_workers_per_model=2
job_queue_size=1024
install_py_dep_per_model=false
EOF
torchserve --stop >/dev/null 2>&1 || true   # one left by an interrupted run
rm -rf "$OUT/ts-logs"
LOG_LOCATION="$OUT/ts-logs" METRICS_LOCATION="$OUT/ts-logs" OMP_NUM_THREADS=1 \
  torchserve --start --foreground --ncs --model-store "$STORE" --ts-config "$OUT/ts.properties" \
  >"$OUT/torchserve.log" 2>&1 &
TS_PID=$!
# --stop ends the Java frontend (killing the launcher alone leaves it running)
trap 'torchserve --stop >/dev/null 2>&1 || true; kill ${TS_PID:-} 2>/dev/null || true' EXIT
wait_http "http://127.0.0.1:$TS_PORT/ping" "$TS_PID" "$OUT/torchserve.log"
fi

warm() { # PORT PATH: a load not counted (first requests, lazy initialisation, JIT)
  "$OUT/loadgen" 127.0.0.1 "$1" "$2" "$OUT/body.json" "$RATE" "$(awk "BEGIN {print $SECONDS_ / 2}")" 64 2 >/dev/null || true
}
# one load run: SERVER MODEL DELAY_US PORT PATH RATE -> a JSON line in $RESULTS; prints p99 ok
measure() {
  R=$("$OUT/loadgen" 127.0.0.1 "$4" "$5" "$OUT/body.json" "$6" "$SECONDS_" 64 1 || true)
  printf '{"server":"%s","model":"%s","max_delay_us":%s,"result":%s}\n' "$1" "$2" "$3" "$R" | tee -a "$RESULTS"
}
# 1 when a run at RATE held: p99 <= 10 ms, every request answered, >= 90% of it achieved
holds() { # SERVER MODEL DELAY_US PORT PATH RATE
  measure "$@" | tail -1 | python3 -c 'import json, sys
r = json.load(sys.stdin)["result"]
print(int(r["errors"] == 0 and r["p99_ms"] <= 10 and r["achieved_per_s"] >= 0.9 * r["offered_per_s"]))'
}
# the sustainable rate: a doubling ladder to the first rate that fails, then BISECT bisections
# between the last rate that held (0 when none did) and that one
ladder() { # SERVER MODEL DELAY_US PORT PATH
  best=0; rate=$LADDER_START; bad=0
  while [ "$rate" -le "$MAX_RATE" ]; do
    if [ "$(holds "$@" "$rate")" = 1 ]; then best=$rate; rate=$((rate * 2)); else bad=$rate; break; fi
  done
  step=0
  while [ "$bad" -gt 0 ] && [ "$step" -lt "$BISECT" ] && [ $((bad - best)) -gt 1 ]; do
    mid=$(( (best + bad) / 2 ))
    if [ "$(holds "$@" "$mid")" = 1 ]; then best=$mid; else bad=$mid; fi
    step=$((step + 1))
  done
  printf '{"server":"%s","model":"%s","max_delay_us":%s,"max_ok_per_s":%s,"first_failing_per_s":%s}\n' \
    "$1" "$2" "$3" "$best" "$bad" | tee -a "$RESULTS"
}

for KIND in $MODELS; do
  MODEL="fmnist_$KIND"
  # both answer the same body with the same logits (the export is the same model)
  EPORT=$(free_port)
  "$EMBER" serve "pipelines/serve_$MODEL.yaml" http.port="$EPORT" >"$OUT/ember.log" 2>&1 &
  EPID=$!
  wait_http "http://127.0.0.1:$EPORT/v2/health/ready" "$EPID" "$OUT/ember.log"
  curl -s -d @"$OUT/body.json" "http://127.0.0.1:$EPORT/v2/models/$MODEL/infer" >"$OUT/answer-$KIND.json"
  kill -TERM "$EPID"; wait "$EPID" || true
  if has "$SERVERS" torchserve; then
    python3 bench/serve/torchserve_export.py "runs/fashion_mnist_$KIND/checkpoints" "$KIND" "$STORE" \
      --check "$OUT/body.json" "$OUT/answer-$KIND.json"
  fi
  for DELAY in $DELAYS; do
    if has "$SERVERS" ember; then
      for POLICY in ${POLICIES:-default}; do
        LABEL=ember; [ "$(echo $POLICIES | wc -w)" -gt 1 ] && LABEL="ember:$POLICY"
        SET_POLICY=""; [ "$POLICY" = default ] || SET_POLICY="models.1.batching.policy=$POLICY"
        EPORT=$(free_port)
        "$EMBER" serve "pipelines/serve_$MODEL.yaml" http.port="$EPORT" models.1.workers=2 models.1.threads=1 \
          models.1.batching.max_delay_us="$DELAY" models.1.batching.max_batch_size=64 \
          $SET_POLICY >"$OUT/ember.log" 2>&1 &
        EPID=$!
        wait_http "http://127.0.0.1:$EPORT/v2/health/ready" "$EPID" "$OUT/ember.log"
        warm "$EPORT" "/v2/models/$MODEL/infer"
        measure "$LABEL" "$MODEL" "$DELAY" "$EPORT" "/v2/models/$MODEL/infer" "$RATE" >/dev/null
        ladder "$LABEL" "$MODEL" "$DELAY" "$EPORT" "/v2/models/$MODEL/infer" >/dev/null
        kill -TERM "$EPID"; wait "$EPID" || true
      done
    fi
    if has "$SERVERS" torchserve; then
      TS_DELAY_MS=$(( (DELAY + 999) / 1000 ))
      curl -sf -X POST "http://127.0.0.1:$TS_MPORT/models?url=$MODEL.mar&model_name=$MODEL&batch_size=64&max_batch_delay=$TS_DELAY_MS&initial_workers=2&synchronous=true" >/dev/null
      curl -sf -X POST "http://127.0.0.1:$TS_PORT/predictions/$MODEL" -H 'Content-Type: application/json' \
        -d @"$OUT/body.json" >"$OUT/ts-answer-$KIND.json"
      warm "$TS_PORT" "/predictions/$MODEL"
      measure torchserve "$MODEL" "$DELAY" "$TS_PORT" "/predictions/$MODEL" "$RATE" >/dev/null
      ladder torchserve "$MODEL" "$DELAY" "$TS_PORT" "/predictions/$MODEL" >/dev/null
      curl -sf -X DELETE "http://127.0.0.1:$TS_MPORT/models/$MODEL" >/dev/null
    fi
  done
done
python3 bench/serve/compare_table.py "$RESULTS" "$RATE"
