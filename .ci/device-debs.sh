#!/usr/bin/env bash
# Run once on the development machine: download the Debian packages of the C
# dependencies into .device-debs/ (git-ignored) so a device run can carry them
# (../shared/docs/device.md). The GPU machine has no cJSON, Check or headers.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device-debs && cd .device-debs
apt-get update -qq
apt-get download libcjson1 libcjson-dev libzstd1 libzstd-dev libcurl4 libcurl4-openssl-dev libssl3 libssl-dev \
  check libsubunit0 libsubunit-dev libnghttp2-14 libpsl5 librtmp1 libssh2-1 libidn2-0 \
  libunistring2 libbrotli1 libldap-2.5-0 libsasl2-2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
  libkrb5support0 libkeyutils1 libcom-err2 libsasl2-modules-db libdb5.3 libgnutls30 \
  libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 libffi8 zlib1g
du -sh .
