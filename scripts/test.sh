#!/usr/bin/env bash
# The test suite: set-up (if needed), then pytest against the real local Triton.
#   bash scripts/test.sh              everything (CI)
#   bash scripts/test.sh -m quick     the library's behaviour without a server, in about a minute
# Tests run on TRITONKIT_TEST_WORKERS pytest-xdist workers (10 by default: they mostly wait on
# servers, not on the CPU); -n N or -p no:xdist on the command line overrides it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# Compiled bytecode is kept (in __pycache__, which git ignores): where the environment says
# PYTHONDONTWRITEBYTECODE, each worker compiled tritonkit and rewrote the tests' asserts anew
# (8.6 CPU s to collect, 4.9 with them kept), as did each command a test runs.
export PYTHONDONTWRITEBYTECODE=
# -n N on the command line replaces the worker count only: --dist loadgroup stays, which
# runs each costly server fixture's tests on one worker (made once), and
# --no-loadscope-reorder, which hands tests out in the order tests/conftest.py sets (the
# machine-alone tests first, the export tests beside them, then the longest). --dist or
# -p no:xdist there replaces them.
workers=(-n "${TRITONKIT_TEST_WORKERS:-10}")
dist=(--dist loadgroup --no-loadscope-reorder)
for arg in "$@"; do
  case "$arg" in
    -n*|--numprocesses*) workers=() ;;
    --dist*|-d) dist=() ;;
    no:xdist) workers=(); dist=() ;;
  esac
done
exec python -m pytest ${workers[@]+"${workers[@]}"} ${dist[@]+"${dist[@]}"} "$@"
