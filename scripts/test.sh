#!/usr/bin/env bash
# The test suite: set-up (if needed), then pytest against the real local Triton.
#   bash scripts/test.sh              everything (CI)
#   bash scripts/test.sh -m quick     the library's behaviour without a server, in about 75 s
# Tests run on TRITONKIT_TEST_WORKERS pytest-xdist workers (10 by default: they mostly wait on
# servers, not on the CPU; 3 for -m quick, which waits on nothing and each worker collects the
# whole suite again: 75 s on 2 cores, where 4 took 84 s, 6 94 s, 10 110-133 s); -n N or
# -p no:xdist on the command line overrides it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# Compiled bytecode is kept (in __pycache__, which git ignores): where the environment says
# PYTHONDONTWRITEBYTECODE, each worker compiled tritonkit and rewrote the tests' asserts anew
# (8.6 CPU s to collect, 4.9 with them kept), as did each command a test runs.
export PYTHONDONTWRITEBYTECODE=
# numpy's OpenBLAS starts a thread per core in every process that imports it and stops
# them as it exits: 0.03-0.08 CPU s a process here, and a run starts some 1,700 (commands,
# load-generator workers, a python-backend stub per model instance). None of them does
# linear algebra in numpy (PyTorch computes with MKL, ONNX Runtime with its own threads).
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
# -n N on the command line replaces the worker count only: --dist loadgroup stays, which
# runs each costly server fixture's tests on one worker (made once), and
# --no-loadscope-reorder, which hands tests out in the order tests/conftest.py sets (the
# machine-alone tests first, the export tests beside them, then the longest). --dist or
# -p no:xdist there replaces them.
count=10
own_workers=""
dist=(--dist loadgroup --no-loadscope-reorder)
previous=""
for arg in "$@"; do
  case "$previous $arg" in
    "-m quick"|*" -mquick") count=3 ;;
  esac
  case "$arg" in
    -n*|--numprocesses*) own_workers=1 ;;
    --dist*|-d) dist=() ;;
    no:xdist) own_workers=1; dist=() ;;
  esac
  previous="$arg"
done
workers=()
[ -n "$own_workers" ] || workers=(-n "${TRITONKIT_TEST_WORKERS:-$count}")
exec python -m pytest ${workers[@]+"${workers[@]}"} ${dist[@]+"${dist[@]}"} "$@"
