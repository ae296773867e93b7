#!/usr/bin/env bash
# Issues 18's and 34's GPU ratios in one table: s4/s3 requests/s at batch 64, minisglang vs
# transformers + outlines-core at batch 32, the mask cost per step, s7's drafts against s6
# and overlap's hidden share (benchmarks/device_check.py).
#
#   bash benchmarks/device_check.sh                 # on a CUDA GPU: under 8 minutes, writes results/device_check.md
#   bash benchmarks/device_check.sh --smoke --device cpu   # tiny sizes: proves it runs end to end
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
exec "$python" "$root/benchmarks/device_check.py" "$@"
