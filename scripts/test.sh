#!/usr/bin/env bash
# The test suite: set-up (if needed), then pytest against the real local Triton.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec python -m pytest "$@"
