# syntax=docker/dockerfile:1
# The operator image: static manager and compaction-proxy binaries on distroless, running as
# non-root. The proxy runs from the same image as a sidecar of agent pods (/compaction-proxy).
#   make docker-build IMG=ghcr.io/harness9/compaction-operator:v0.1.0 VERSION=v0.1.0
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so code changes reuse the module download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY compaction/ compaction/
COPY internal/ internal/
COPY hack/build-static.sh hack/build-static.sh
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH
RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} VERSION=${VERSION} hack/build-static.sh /out/manager ./cmd/manager
RUN GOOS=${TARGETOS} GOARCH=${TARGETARCH} VERSION=${VERSION} hack/build-static.sh /out/compaction-proxy ./cmd/compaction-proxy

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /manager
COPY --from=build /out/compaction-proxy /compaction-proxy
USER 65532:65532
ENTRYPOINT ["/manager"]
