#!/usr/bin/env bash
# Create .venv and install tritonkit with everything it needs; quick when already done.
# Sourced by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
STAMP="$VENV/.tritonkit-installed"
want="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/bootstrap.sh" | sha256sum | cut -d' ' -f1)"

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  echo "tritonkit: setting up $VENV (first run takes a few minutes)" >&2
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch first and pinned: 2.13.0 is the CPU build on our machines' disk (a plain
  # `torch` would pull gigabytes of CUDA wheels).
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e "$ROOT[dev,bench,docs,export-gpu]"
  # The embedded tritonserver 2.51.0 (python backend). --no-deps: the wheel pins
  # numpy<2 and Python packages the server binary does not need.
  "$VENV/bin/python" -m pip install -q --no-deps "nvidia-pytriton==0.7.0"
  echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
