#!/bin/sh
# tests/distributed/pagerank_job.sh EMBER - the PageRank job over 2 ranks: the scores file
# equals a single process's (reorder none) byte for byte, the partitioned cache is reused
# by a second run and refused at 3 ranks, and a killed rank ends the others with a timeout.
set -u
EMBER=$1
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
JOB="$HERE/../../pipelines/pagerank_kron.yaml graph.generate.scale=11 pagerank.tol=0 pagerank.max_iter=25"
"$EMBER" launch -n 2 --threads 1 run $JOB graph.cache=$T/kron.emp output.scores=$T/d.tsv >"$T/out1" 2>&1 ||
  { cat "$T/out1"; fail "distributed job"; }
grep -q '"world_size":2' "$T/out1" || fail "no world_size in the JSON line"
grep -q '"bytes_sent_per_iteration"' "$T/out1" || fail "no per-rank figures"
"$EMBER" run $JOB graph.reorder=none output.scores=$T/s.tsv >"$T/out0" 2>&1 || { cat "$T/out0"; fail "single job"; }
cmp -s "$T/d.tsv" "$T/s.tsv" || fail "distributed scores differ from the single process's"
"$EMBER" launch -n 2 --threads 1 run $JOB graph.cache=$T/kron.emp >"$T/out2" 2>&1 || { cat "$T/out2"; fail "rerun"; }
grep -q '"graph_from":"cache"' "$T/out2" || { cat "$T/out2"; fail "the cache was not reused"; }
"$EMBER" launch -n 3 --threads 1 run $JOB graph.cache=$T/kron.emp >"$T/out3" 2>&1 && fail "3 ranks took a 2-rank cache"
grep -q 'was built for 2 ranks, this group has 3' "$T/out3" || { cat "$T/out3"; fail "no clear refusal"; }
# a weighted file: the partitioned job follows the weights (true, then auto from its cache)
# and writes the single process's weighted scores; weighted=false its unweighted ones
WJOB="$HERE/../../pipelines/pagerank_file.yaml graph.input.path=$HERE/../../examples/data/trade.mtx pagerank.tol=0"
"$EMBER" run $WJOB graph.reorder=none pagerank.weighted=true output.scores=$T/ws.tsv >"$T/w0" 2>&1 ||
  { cat "$T/w0"; fail "single weighted job"; }
"$EMBER" run $WJOB graph.reorder=none pagerank.weighted=false output.scores=$T/us.tsv >"$T/w0" 2>&1 ||
  { cat "$T/w0"; fail "single unweighted job"; }
for W in true auto false; do
  "$EMBER" launch -n 2 --threads 1 run $WJOB graph.cache=$T/trade.emp pagerank.weighted=$W output.scores=$T/wd.tsv \
    >"$T/w1" 2>&1 || { cat "$T/w1"; fail "distributed weighted=$W job"; }
  if [ $W = false ]; then E=false; R=us; else E=true; R=ws; fi
  grep -q "\"weighted\":$E" "$T/w1" || { cat "$T/w1"; fail "weighted=$W: no \"weighted\":$E in the JSON line"; }
  cmp -s "$T/wd.tsv" "$T/$R.tsv" || fail "weighted=$W: distributed scores differ from the single process's"
done
grep -q '"graph_from":"cache"' "$T/w1" || { cat "$T/w1"; fail "the weighted cache was not reused"; }
# rank 1 dies before ranking: rank 0 must end with the timeout naming rank 1
cat >"$T/kill.lua" <<'LUA'
local ffi = require 'ffi'
ffi.cdef 'int raise(int sig); int getpid(void); int kill(int pid, int sig);'
ember.dist.init()
local g = ember.graph.kronecker { scale = 10, group = true }
if ember.dist.rank() == 1 then ffi.C.kill(ffi.C.getpid(), 9) end
g:pagerank { tol = 0, max_iter = 1000 }
print('finished: that is wrong')
LUA
timeout 60 "$EMBER" launch -n 2 --threads 1 --timeout 3 --mpi-arg=--enable-recovery "$T/kill.lua" >"$T/out4" 2>&1
grep -q 'timed out after' "$T/out4" && grep -q 'waiting for rank 1' "$T/out4" || { cat "$T/out4"; fail "no timeout"; }
grep -q 'finished: that is wrong' "$T/out4" && fail "a rank finished"
echo "pagerank_job: ok"
