#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run of a few minutes: on a GPU host with
# tritonkit installed, or on the tool library's device machine (its python3 holds a CUDA
# torch; tritonkit's other packages travel as wheels in .whl/, see the README).
#
#   bash scripts/gpu_check.sh [OUT]      writes OUT/ (default out/gpu-check)
#
# What runs: nvidia-smi; scripts/gpu_check.py (the example models exported from the GPU
# and verified there, NVML read idle and busy, what the TensorRT path says); `tritonkit
# doctor` for both profiles; `tritonkit monitor` for two seconds; the GPU-marked and NVML-reading tests.
#
# The wheels for the device machine (Python 3.12 there), fetched here beforehand:
#   for w in tritonclient==2.51.0 hdrhistogram==0.10.8 typer==0.29.2 gevent geventhttpclient \
#            python-rapidjson greenlet zope.event zope.interface brotli hpack httptools \
#            pydantic pydantic_core annotated-types typing-inspection typing_extensions; do
#     python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux1_x86_64 --platform any -d .whl "$w"; done
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${1:-${OUT:-out/gpu-check}}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
if [ -d .whl ] && ! "$PY" -c "import tritonclient, hdrh, typer" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
export PYTHONUNBUFFERED=1
status=0
step() { echo "== $*"; }

step nvidia-smi
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,pcie.link.gen.max \
  --format=csv 2>&1 | tee "$OUT/nvidia-smi.csv"

step "export on the GPU, NVML, TensorRT path"
timeout 300 "$PY" scripts/gpu_check.py "$OUT" 2>&1 | tee "$OUT/gpu_check.log"; [ "${PIPESTATUS[0]}" = 0 ] || status=1

for gpu in a10 p100; do
  step "tritonkit doctor --gpu $gpu"
  timeout 60 "$PY" -m tritonkit doctor --gpu "$gpu" --json "$OUT/doctor-$gpu.json" --force 2>&1 \
    | tee "$OUT/doctor-$gpu.log"
done

step "tritonkit monitor on this GPU"
timeout 60 "$PY" -m tritonkit monitor --interval 0.5 --duration 2 --csv "$OUT/monitor.csv" \
  --force 2>&1 | tee "$OUT/monitor.log"; [ "${PIPESTATUS[0]}" = 0 ] || status=1

step "tests that read a GPU (TensorRT plan build, NVML, doctor)"
timeout 300 "$PY" -m pytest -q -rs -p no:cacheprovider -m "not server" \
  tests/test_export_tensorrt.py tests/test_doctor.py tests/monitor 2>&1 \
  | tee "$OUT/tests.log"; [ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
