#!/usr/bin/env bash
# The main job, end to end, on the embedded local Triton (set-up included on first run).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
REPO="${TRITONKIT_DEMO_REPOSITORY:-model_repository}"
trap 'tritonkit down --repository "$REPO" >/dev/null 2>&1 || true' EXIT
tritonkit deploy --target local --repository "$REPO" --http-port 0 --grpc-port 0 --metrics-port 0
python - "$REPO" <<'PY'
import sys
import numpy as np
import tritonclient.http as httpclient
from tritonkit.server.state import load_deployment

deployment = load_deployment(sys.argv[1])
client = httpclient.InferenceServerClient(deployment.http_url)
x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
inp = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
y = client.infer("example", [inp]).as_numpy("OUTPUT__0")
print("example(", x.tolist(), ") =", y.round(4).tolist())
PY
