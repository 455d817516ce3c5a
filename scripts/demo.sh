#!/usr/bin/env bash
# The main job, end to end, on the embedded local Triton (set-up included on first run):
# export an example PyTorch model -> deploy locally (warms up) -> warm up again -> request.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
REPO="${TRITONKIT_DEMO_REPOSITORY:-out/demo_repository}"
mkdir -p "$(dirname "$REPO")"
trap 'tritonkit down --repository "$REPO" >/dev/null 2>&1 || true' EXIT
tritonkit export examples/mlp.py:build --name mlp --repository "$REPO" --force
tritonkit deploy --target local --repository "$REPO" --http-port 0 --grpc-port 0 --metrics-port 0
tritonkit warmup --repository "$REPO" --json out/warmup.json
python - "$REPO" <<'PY'
import sys
import numpy as np
import tritonclient.http as httpclient
from tritonkit.server.state import load_deployment

deployment = load_deployment(sys.argv[1])
client = httpclient.InferenceServerClient(deployment.http_url)
meta = client.get_model_metadata("mlp")
shape = [1] + [int(d) for d in meta["inputs"][0]["shape"][1:]]
x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
inp = httpclient.InferInput(meta["inputs"][0]["name"], shape, "FP32")
inp.set_data_from_numpy(x)
y = client.infer("mlp", [inp]).as_numpy(meta["outputs"][0]["name"])
print("mlp answered with shape", list(y.shape), "first values", y.ravel()[:3].round(4).tolist())
PY
