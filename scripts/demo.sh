#!/usr/bin/env bash
# The main job, end to end, on the embedded local Triton (set-up included on first run):
# export an example PyTorch model -> deploy locally (warms up) -> warm up again -> load test
# against an SLA (the exit code is the verdict; report in out/loadtest.{json,csv,png}).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
REPO="${TRITONKIT_DEMO_REPOSITORY:-out/demo_repository}"
mkdir -p "$(dirname "$REPO")"
trap 'tritonkit down --repository "$REPO" >/dev/null 2>&1 || true' EXIT
tritonkit export examples/mlp.py:build --name mlp --repository "$REPO" --force
tritonkit deploy --target local --repository "$REPO" --http-port 0 --grpc-port 0 --metrics-port 0
# As after a restart: --reload brings the cold start back; out/warmup.png shows it decay.
tritonkit warmup --repository "$REPO" --reload --json out/warmup.json --plot out/warmup.png --force
# The verdict is the exit code: 0 the SLA held, 3 it was missed, 4 requests failed.
tritonkit loadtest --repository "$REPO" --model mlp --concurrency 1,8 --duration 5 \
  --sla-p99-ms "${TRITONKIT_DEMO_SLA_P99_MS:-50}" --sla-min-qps 100 \
  --json out/loadtest.json --csv out/loadtest.csv --plot out/loadtest.png --force
