#!/bin/sh
# bench/recsys/setup.sh - DLRM's own model code for the peer, fetched at bench time (never
# committed): a shallow clone of facebookresearch/dlrm into bench/recsys/.dlrm, or the
# checkout named by DLRM_DIR. dlrm_s_pytorch.py imports scikit-learn and tqdm (installed here with pip when missing).
set -e
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$DLRM_DIR" ]; then src=$DLRM_DIR; else
  src=$here/.dlrm
  [ -f "$src/dlrm_s_pytorch.py" ] || git clone --depth 1 https://github.com/facebookresearch/dlrm "$src"
fi
[ -f "$src/dlrm_s_pytorch.py" ] || { echo "setup: no dlrm_s_pytorch.py in $src" >&2; exit 1; }
python3 -c 'import sklearn, tqdm' 2>/dev/null || python3 -m pip install -q scikit-learn tqdm
echo "$src"
