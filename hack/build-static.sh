#!/usr/bin/env bash
# Builds a static, reproducible binary of a main package: the exact command the Dockerfile
# runs, so test/image can check the result without a Docker engine.
#   hack/build-static.sh OUT [PACKAGE]    (VERSION=v1.2.3 sets the version string)
set -euo pipefail
out=${1:?usage: hack/build-static.sh OUT [PACKAGE]}
pkg=${2:-./cmd/manager}
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION:-dev}" -o "$out" "$pkg"
