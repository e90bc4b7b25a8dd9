#!/usr/bin/env bash
# On the GPU machine: unpack the carried Debian packages, configure with CUDA
# (sm_90a), build into build-gpu/. Source it: `. .ci/device-build.sh`.
set -euo pipefail
mkdir -p /tmp/deps
export D=/tmp/deps/usr
export CMAKE_PREFIX_PATH=$D PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig:$D/share/pkgconfig
export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Once per machine (tests/bench/device_prefill_prof.sh then builds several
# trees at once): unpack, and point the .pc files (prefix=/usr) at the
# unpacked tree.
if [ ! -f /tmp/deps/.unpacked ]; then
  for f in .device-debs/*.deb; do dpkg -x "$f" /tmp/deps; done
  for pc in "$D"/lib/x86_64-linux-gnu/pkgconfig/*.pc "$D"/share/pkgconfig/*.pc; do
    if [ -f "$pc" ]; then sed -i "s#=/usr\(/\|$\)#=$D\1#g" "$pc"; fi
  done
  touch /tmp/deps/.unpacked
fi
# MTPQ_DEVICE_ENV_ONLY=1: the environment and the packages only, no build
if [ "${MTPQ_DEVICE_ENV_ONLY:-0}" = 1 ]; then return 0 2>/dev/null || exit 0; fi
rm -f build-gpu/CMakeCache.txt  # cached pkg-config paths may be stale
cmake -S . -B build-gpu -DMTPQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DMTPQ_BUILD_TESTS=ON \
  -DBUILD_TESTING=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_BUILD_RPATH="$D/lib/x86_64-linux-gnu" \
  > "${OUT:-/tmp}/configure.log" 2>&1 || { tail -40 "${OUT:-/tmp}/configure.log"; exit 1; }
# MTPQ_DEVICE_TARGETS: build only those targets (default: all)
cmake --build build-gpu -j"$(nproc)" ${MTPQ_DEVICE_TARGETS:+--target $MTPQ_DEVICE_TARGETS} > "${OUT:-/tmp}/build.log" 2>&1 || { tail -60 "${OUT:-/tmp}/build.log"; exit 1; }
