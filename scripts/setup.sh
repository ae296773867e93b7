#!/usr/bin/env bash
# Set up minisglang on a fresh machine: a virtual environment in .venv with torch 2.13.0
# (CPU), the package with all its extras, graphviz's `dot`, and the real tokenizers the
# tests use. Safe to run again: it skips what is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.minisglang-setup
# The stamp hashes what the install depends on: pyproject's dependency lists (not its tool
# settings: a new pytest marker must not reinstall torch) and this script.
deps=$($PY -c 'import json, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p.get("dependencies"), p.get("optional-dependencies")], sort_keys=True))' 2>/dev/null \
  || cat pyproject.toml)
want=$( (echo "$deps"; cat scripts/setup.sh) | sha256sum | cut -c1-16)

# 1. graphviz's `dot` renders the FSM and radix-tree drawings.
if ! command -v dot >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing graphviz (dot) with apt-get"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null) \
      || echo "[setup] WARNING: apt-get could not install graphviz; drawings will be DOT text only"
  else
    echo "[setup] WARNING: graphviz's 'dot' is not installed and this is not a root shell with apt-get."
    echo "[setup]          Install it yourself (Debian/Ubuntu: sudo apt-get install graphviz;"
    echo "[setup]          macOS: brew install graphviz). Without it drawings stay DOT text and"
    echo "[setup]          the rendering tests are skipped with that reason."
  fi
fi

# 1b. A headless browser: tests/test_trace_browser.py opens the step view's page in chromium.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing chromium and chromium-driver with apt-get"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "[setup] WARNING: apt-get could not install chromium; the browser tests will be skipped"
  else
    echo "[setup] WARNING: chromium and chromedriver are not installed and this is not a root shell with apt-get."
    echo "[setup]          Install them yourself (Debian/Ubuntu: sudo apt-get install chromium chromium-driver)."
    echo "[setup]          Without them tests/test_trace_browser.py is skipped with that reason."
  fi
fi

# 2. The virtual environment. torch first and pinned: anything unpinned would let pip
#    pick a multi-GB CUDA build.
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  [ -d $VENV ] || $PY -m venv $VENV
  $VENV/bin/python -m pip install -q --upgrade pip
  $VENV/bin/python -m pip install -q torch==2.13.0
  $VENV/bin/python -m pip install -q -e ".[all]" "torch==2.13.0"
  $VENV/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
  echo "$want" > "$STAMP"
fi

# 2b. The lazy automaton's hot modules compiled by mypyc from the same source files, into
#     build/mypyc (minisglang/constrained/compiled_build.py says how the package picks it up).
#     Skipped when the build there matches the sources; without a C compiler, or when the
#     build fails, the package runs those modules as pure Python (said once, here).
if ! $VENV/bin/python -c 'import sys; from minisglang.constrained import compiled_build as c; sys.exit(c.active != "compiled")' 2>/dev/null; then
  echo "[setup] compiling the lazy automaton with mypyc (about a minute)"
  $VENV/bin/python scripts/build_compiled.py \
    || echo "[setup] NOTE: the lazy automaton runs as pure Python (the same masks, slower first visits)"
fi

# 3. A real 65k byte-level BPE tokenizer for the tests: the tokenizer.json inside the
#    anthropic==0.3.11 wheel, downloaded without installing that old package.
TOK=.cache/tokenizers/anthropic-0.3.11
if [ ! -f $TOK/tokenizer.json ]; then
  mkdir -p $TOK
  tmp=$(mktemp -d)
  $VENV/bin/python -m pip download -q --no-deps -d "$tmp" anthropic==0.3.11
  $VENV/bin/python - "$tmp" "$TOK" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/anthropic-0.3.11-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2] + "/tokenizer.json", "wb") as f:
    f.write(z.read("anthropic/tokenizer.json"))
PY
  rm -rf "$tmp"
fi
echo "[setup] ready: $($VENV/bin/python -c 'import torch, minisglang; print("torch", torch.__version__)')"
