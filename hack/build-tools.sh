#!/usr/bin/env bash
# Builds every tool the tests and the demo need into bin/, from the Go module proxy.
# Each tool has its own go.mod under hack/tools/ so its dependencies never leak into the
# operator's module. A tool is rebuilt only when its go.mod is newer than the binary, so a
# rerun with everything present takes well under a second.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin"

KUBE_VERSION=v1.37.2
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=37 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=37"

HELM_VERSION=v4.3.2
helm_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
KUBECONFORM_VERSION=v0.8.0

# build NAME TOOLDIR PACKAGE [LDFLAGS]
build() {
	local name=$1 dir="$root/hack/tools/$2" pkg=$3 ldflags=${4:--s -w}
	local out="$bin/$name"
	if [[ -x "$out" && "$out" -nt "$dir/go.mod" && "$out" -nt "$dir/go.sum" ]] &&
		{ [[ ! -f "$dir/main.go" ]] || [[ "$out" -nt "$dir/main.go" ]]; }; then
		return 0
	fi
	echo "building $name ($pkg)" >&2
	# -dwarf=false: the binaries are stripped anyway (-s -w), so skip generating debug info
	# in every package; that is a good part of a cold build's compile time.
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath -gcflags=all=-dwarf=false -ldflags "$ldflags" -o "$out.tmp" "$pkg")
	mv "$out.tmp" "$out"
}

want=${*:-kube-apiserver kubectl etcd minio controller-gen helm kubeconform}
for t in $want; do
	case $t in
	kube-apiserver) build kube-apiserver kubernetes k8s.io/kubernetes/cmd/kube-apiserver "$kube_ldflags" ;;
	kubectl) build kubectl kubernetes k8s.io/kubernetes/cmd/kubectl "$kube_ldflags" ;;
	etcd) build etcd etcd go.etcd.io/etcd/server/v3 ;;
	minio) build minio minio github.com/minio/minio ;;
	controller-gen) build controller-gen controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen ;;
	# helm and kubeconform: the chart tests (test/helm) lint, render, validate and install
	# charts/compaction-operator with them.
	helm) build helm helm helm.sh/helm/v4/cmd/helm "$helm_ldflags" ;;
	kubeconform) build kubeconform kubeconform github.com/yannh/kubeconform/cmd/kubeconform "-s -w -X main.version=${KUBECONFORM_VERSION}" ;;
	# golangci-lint with kube-api-linter compiled in (hack/tools/golangci-lint/main.go).
	golangci-lint) build golangci-lint golangci-lint . ;;
	*) echo "unknown tool $t" >&2; exit 2 ;;
	esac
done
