#!/usr/bin/env bash
# A stand-in for NGC's tritonserver:24.10-py3 where nvcr.io cannot be reached: Debian 12
# with tritonserver 2.51.0 (the same release) from the nvidia-pytriton wheel, laid out as
# NGC lays it (/opt/tritonserver/{bin,lib,backends/python}, user triton-server uid 1000),
# Python 3 with numpy and ONNX Runtime (CPU), and curl. It has the python backend only:
# ONNX models are served through tritonkit's python-backend adapter
# (deploy --target compose --onnx-backend python). See docker/README.md.
#
# usage: docker/standin/build.sh [NAME]     (as root: debootstrap; default NAME tritonkit-standin)
# Prints NAME:TAG, TAG a hash of this script (its pins and steps). An image of that tag
# already there is not built again; the Debian root filesystem is cached in $CACHE.
set -euo pipefail

NAME="${1:-tritonkit-standin}"
PYTHON="${PYTHON:-python3}"            # a Python with pip: downloads and unpacks the wheels
CACHE="${TRITONKIT_STANDIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonkit/standin}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm                         # Python 3.11, glibc 2.36 (the wheel needs 2.35)
PY=3.11
PACKAGES=python3,python3-numpy,libpython3.11,curl,ca-certificates
PYTRITON=nvidia-pytriton==0.7.0        # tritonserver 2.51.0 = NGC 24.10
ONNXRUNTIME=onnxruntime==1.19.2        # the ONNX Runtime NGC 24.10 ships

say() { echo "standin: $*" >&2; }

TAG="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-12)"
IMAGE="$NAME:$TAG"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE is built already"
  echo "$IMAGE"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "error: debootstrap needs root" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "error: no debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/work.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# The Debian root filesystem, cached by what it holds: later builds skip the ~65 s.
BASE="$CACHE/$SUITE-minbase-$(echo "$SUITE $PACKAGES" | sha256sum | cut -c1-12).tar"
if [ ! -f "$BASE" ]; then
  say "debootstrap $SUITE ($PACKAGES) from $MIRROR"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$WORK/base" "$MIRROR" >&2
  rm -rf "$WORK/base"/var/cache/apt/archives/*.deb "$WORK/base"/var/lib/apt/lists/*
  tar -C "$WORK/base" -cf "$WORK/base.tar" .
  mv "$WORK/base.tar" "$BASE"
  rm -rf "$WORK/base"
fi

say "wheels: $PYTRITON $ONNXRUNTIME"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --dest "$CACHE/wheels" \
  --python-version "$PY" --implementation cp --abi "cp${PY/./}" --abi none \
  --platform manylinux_2_35_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  "$PYTRITON" "$ONNXRUNTIME" >&2
wheel() { ls "$CACHE"/wheels/"$1"-*.whl | head -n1; }

ROOT="$WORK/root"
mkdir -p "$ROOT"
tar -C "$ROOT" -xf "$BASE"
"$PYTHON" -m zipfile -e "$(wheel nvidia_pytriton-"${PYTRITON#*==}")" "$WORK/pytriton"
SERVER="$WORK/pytriton/pytriton/tritonserver"
mkdir -p "$ROOT"/opt/tritonserver/{bin,lib,backends/python}
install -m 0755 "$SERVER/bin/tritonserver" "$ROOT/opt/tritonserver/bin/"
cp -a "$WORK"/pytriton/nvidia_pytriton.libs/. "$ROOT/opt/tritonserver/lib/"
cp -a "$SERVER"/backends/python/libtriton_python.so \
  "$SERVER"/backends/python/triton_python_backend_utils.py "$ROOT/opt/tritonserver/backends/python/"
install -m 0755 "$SERVER/python_backend_stubs/$PY/triton_python_backend_stub" \
  "$ROOT/opt/tritonserver/backends/python/"
# The server finds its libraries by its RPATH ($ORIGIN/../lib); the python backend and
# its stub look elsewhere, so the loader is told.
echo /opt/tritonserver/lib > "$ROOT/etc/ld.so.conf.d/tritonserver.conf"
ldconfig -r "$ROOT"
"$PYTHON" -m zipfile -e "$(wheel onnxruntime-"${ONNXRUNTIME#*==}")" \
  "$ROOT/usr/local/lib/python$PY/dist-packages"
chroot "$ROOT" groupadd --gid 1000 triton-server
chroot "$ROOT" useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash triton-server

say "docker import $IMAGE"
tar -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/opt/tritonserver/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'WORKDIR /opt/tritonserver' \
  --change "LABEL org.opencontainers.image.title=tritonkit-standin" \
  --change 'CMD ["tritonserver", "--help"]' - "$IMAGE" >&2
echo "$IMAGE"
