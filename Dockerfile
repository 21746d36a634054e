# syntax=docker/dockerfile:1
# The operator image: a static manager binary on distroless, running as non-root.
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

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
