#!/usr/bin/env bash
# Shared set-up for .ci/example and .ci/test: install what is missing (Debian
# packages, the Python test peers), then configure and build into build/.
# Environment: BUILD_DIR (default build), MTPQ_CMAKE_ARGS (extra cmake args),
# MTPQ_SKIP_PY=1 skips the Python peers.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

DEBS="build-essential cmake pkg-config libcjson-dev libzstd-dev libcurl4-openssl-dev libssl-dev check python3 python3-pip clang-format clang zstd"
missing=""
for p in $DEBS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "== installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# Python test peers (independent implementations the tests compare against).
if [ "${MTPQ_SKIP_PY:-0}" != 1 ]; then
  if ! python3 -c 'import safetensors, numpy, ml_dtypes, tokenizers, huggingface_hub, moto, boto3, flask' 2>/dev/null ||
     [ "$(python3 -c 'import safetensors; print(safetensors.__version__)')" != 0.8.0 ]; then
    echo "== installing Python test peers"
    python3 -m pip install -q --disable-pip-version-check -r tests/requirements.txt ||
      python3 -m pip install -q --disable-pip-version-check --break-system-packages -r tests/requirements.txt
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
echo "== configuring and building in $BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPQ_BUILD_TESTS=ON \
  -DBUILD_TESTING=ON ${MTPQ_CMAKE_ARGS:-} >"$BUILD_DIR.configure.log" 2>&1 ||
  { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j"$(nproc)"
