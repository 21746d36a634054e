# compaction-operator — see README.md. Two commands for a newcomer: `make demo`, `make test`.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
GO         ?= go
GOTESTFLAGS ?= -race -count=1
# Real transcripts for benchmarks, e.g. make bench TRANSCRIPTS=../shared/testdata/real
TRANSCRIPTS ?=
# Filesystem store for benchmarks: tmpfs when the machine has one.
BENCH_STORE_DIR ?= $(shell [ -d /dev/shm ] && echo /dev/shm/compaction-bench || echo)
BENCHTIME  ?= 1s
# Fuzz budget per target: empty runs each target's execution count in FUZZ_TARGETS (about
# 10 s each here); a duration such as 30s or a count such as 1000x overrides it for all.
FUZZTIME   ?=

export KUBEBUILDER_ASSETS := $(BIN)

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Newcomer commands

.PHONY: demo
demo: build ## The operator on a local control plane: replay an agent transcript through the compaction API, then delete the session (DEMO_KEEP=1 keeps it running).
	@hack/build-tools.sh kube-apiserver etcd kubectl minio
	@$(GORUN) ./hack/demo

.PHONY: test
test: tools ## Build the tools, then run every test (race detector on) against real MinIO, etcd and kube-apiserver.
	$(GO) test $(GOTESTFLAGS) ./...

##@ Development

.PHONY: tools
tools: ## Build kube-apiserver, kubectl, etcd, MinIO, controller-gen, helm and kubeconform into bin/ from the Go module proxy; fetch Node and npm from the npm registry and npm ci the Node tests' packages and the coding agents of test/agents (Claude Code, Codex, Gemini CLI, the Agents SDK).
	@hack/build-tools.sh

.PHONY: build
build: ## Build compactctl, the manager and compaction-proxy into bin/ (static, as the image builds them).
	hack/build-static.sh $(BIN)/compactctl ./cmd/compactctl
	hack/build-static.sh $(BIN)/manager ./cmd/manager
	hack/build-static.sh $(BIN)/compaction-proxy ./cmd/compaction-proxy

IMG ?= ghcr.io/harness9/compaction-operator:latest
VERSION ?= dev

.PHONY: docker-build
docker-build: ## Build the operator image (needs a Docker engine; test/image checks the same build without one).
	docker build -t $(IMG) --build-arg VERSION=$(VERSION) .

.PHONY: dev-cluster
dev-cluster: tools build ## Run kube-apiserver, etcd, MinIO and the manager locally until Ctrl-C, for kubectl.
	$(GORUN) ./hack/devenv

.PHONY: bench
bench: ## Engine, request-decoding and compaction-proxy benchmarks (set TRANSCRIPTS=dir to add the real transcripts, BENCH_SCALE=1 to add 1,000 to 100,000 messages).
	@mkdir -p $(BENCH_STORE_DIR)
	TRANSCRIPTS=$(TRANSCRIPTS) BENCH_SCALE=$(BENCH_SCALE) BENCH_STORE_DIR=$(BENCH_STORE_DIR) $(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) -timeout=30m ./compaction/... ./internal/compactrequest/ ./internal/compactapi/ ./internal/proxy/

.PHONY: bench-table
bench-table: ## The engine table of docs/benchmarks.md (BenchmarkCompactWithRecord, 20 iterations per mode, store on tmpfs), printed as Markdown.
	@mkdir -p $(BENCH_STORE_DIR)
	@BENCH_STORE_DIR=$(BENCH_STORE_DIR) $(GO) test -run '^$$' -bench 'CompactWithRecord' -benchmem -benchtime=20x -timeout=30m ./compaction/ | tee /dev/stderr | $(GORUN) ./hack/benchtable

.PHONY: bench-smoke
bench-smoke: tools ## Every benchmark of the repository once (-benchtime 1x, the latency benchmark with a 300 ms summarizer), as CI runs them: a benchmark that breaks fails CI. The figures mean nothing.
	@mkdir -p $(BENCH_STORE_DIR)
	BENCH_STORE_DIR=$(BENCH_STORE_DIR) BENCH_LATENCY_DELAYS=300ms $(GO) test -run '^$$' -bench . -benchtime=1x -timeout=30m ./...

.PHONY: bench-latency
bench-latency: tools ## What an agent waits for with a slow summarizer: an OpenAI SDK loop through compaction-proxy and the manager, summaries on and off the turn (issue 29; about 10 minutes).
	$(GO) test -run '^$$' -bench BenchmarkSummarizerLatency -benchtime=1x -timeout=30m ./test/proxy/

.PHONY: eval
eval: ## Quality benchmark: replay each transcript of TRANSCRIPTS (default ../shared/testdata/real) at 1/5 and 1/10 of its size and print which probe facts (testdata/probes) the final views kept; EVAL_FLAGS adds compactctl eval flags.
	@dir="$(or $(TRANSCRIPTS),../shared/testdata/real)"; \
	if ! ls "$$dir"/*.jsonl >/dev/null 2>&1; then echo "eval: no *.jsonl transcript in $$dir (set TRANSCRIPTS=dir)"; exit 1; fi; \
	$(GORUN) ./cmd/compactctl eval --probes testdata/probes $(EVAL_FLAGS) "$$dir"/*.jsonl

# Every fuzz target, as package:Name. Their seed corpora are in the package's
# testdata/fuzz/<Name>/ and run as plain tests in `make test`.
# package:target:executions. Counts, not durations: a duration-based -fuzztime can fail with
# "context deadline exceeded" at its end on a loaded machine (golang/go#75804, Go < 1.27).
FUZZ_TARGETS := \
	./compaction/:FuzzParseAnchors:50000x \
	./compaction/:FuzzDecodeTranscript:75000x \
	./compaction/:FuzzSafeKey:300000x \
	./compaction/:FuzzRepairToolPairs:6000x \
	./compaction/:FuzzAppendJSONString:100000x \
	./compaction/anthropic/:FuzzAnthropicRoundTrip:100000x \
	./compaction/responses/:FuzzResponsesRoundTrip:100000x \
	./compaction/gemini/:FuzzGeminiRoundTrip:100000x \
	./internal/compactrequest/:FuzzDecodeCompactRequest:30000x \
	./internal/jsonscan/:FuzzScan:100000x \
	./compaction/internal/toolout/:FuzzExceptionLine:50000x \
	./compaction/internal/toolout/:FuzzErrorLineMatch:20000x \
	./compaction/internal/toolout/:FuzzRankTriggers:100000x \
	./compaction/internal/textcut/:FuzzOneLine:100000x \
	./compaction/internal/toolargs/:FuzzDecodeString:100000x

.PHONY: fuzz
fuzz: ## Fuzz every target for its execution count (or FUZZTIME); fails if any target fails or is not listed.
	@found=$$(git grep -h -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed 's/^func //' | sort); \
	listed=$$(for t in $(FUZZ_TARGETS); do t=$${t%:*}; echo "$${t##*:}"; done | sort); \
	if [ "$$found" != "$$listed" ]; then echo "fuzz: FUZZ_TARGETS in the Makefile lists:" $$listed "but the tests define:" $$found; exit 1; fi
	@failed=; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
		budget=$${FUZZTIME:-$$budget}; \
		echo "== $$name ($$pkg, $$budget)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime "$$budget" "$$pkg" || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

.PHONY: fmt
fmt: ## gofmt every Go file.
	gofmt -w $$(git ls-files '*.go')

# go vet and go run build with the flags of hack/build-static.sh (the image's: CGO_ENABLED=0
# -trimpath), as do `make build` and the binaries the tests run (testenv.Build): one compile of
# the dependencies serves all of them. (The race-detector tests need their own: -race needs cgo.)
VET := CGO_ENABLED=0 $(GO) vet -trimpath
GORUN := CGO_ENABLED=0 $(GO) run -trimpath

.PHONY: vet
vet: ## go vet.
	$(VET) ./...

# golangci-lint type-checks against export data from `go list -export`, which compiles every
# dependency: with go vet's flags those compiles are the ones vet (make verify) already cached.
# With the defaults (cgo on, no -trimpath) a cold run compiled them all again: 388 s instead of
# 75 s after a cold go vet on 2 cores.
.PHONY: lint
lint: ## golangci-lint (built into bin/ on first use).
	@hack/build-tools.sh golangci-lint
	CGO_ENABLED=0 GOFLAGS="-trimpath $$GOFLAGS" $(BIN)/golangci-lint run ./...

.PHONY: verify
verify: manifests generate helm docs ## Fail when gofmt, go vet, go mod tidy or `make manifests generate helm docs` would change anything.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-clean: $$out"; exit 1; fi
	$(GO) run ./hack/doclinks
	$(VET) ./...
	$(GO) mod tidy -diff
	@if $(GO) list -deps ./compaction/... | grep -E '^(k8s\.io|sigs\.k8s\.io)/'; then \
		echo "compaction/ must not import Kubernetes packages (see above)"; exit 1; fi
	@if $(GO) list -deps ./internal/compactrequest/ | grep -E '^(k8s\.io|sigs\.k8s\.io)/'; then \
		echo "internal/compactrequest/ must not import Kubernetes packages (its fuzz target would build them with coverage)"; exit 1; fi
	@if $(GO) list -deps ./cmd/manager ./cmd/compactctl | grep '/internal/dev/'; then \
		echo "the shipped binaries must not import internal/dev/ (dev tooling and test helpers, see above)"; exit 1; fi
	@git diff --exit-code -- api config charts docs/api.md || { echo "generated files are stale: run make manifests generate helm docs and commit"; exit 1; }
	@out=$$(git ls-files --others --exclude-standard -- api config charts docs/api.md); if [ -n "$$out" ]; then \
		echo "untracked generated files (commit them): $$out"; exit 1; fi

.PHONY: clean
clean: ## Remove built binaries (keeps bin/ tools).
	rm -f $(BIN)/compactctl

##@ Code generation

.PHONY: manifests
manifests: ## Generate the CRDs (config/crd/bases) and RBAC from the kubebuilder markers.
	@hack/build-tools.sh controller-gen
	$(BIN)/controller-gen rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: helm
helm: ## Regenerate the Helm chart's CRDs and RBAC rules (charts/compaction-operator) from config/.
	@hack/helm-sync.sh

.PHONY: docs
docs: ## Generate docs/api.md, the API reference, from the CRDs.
	$(GORUN) ./hack/apidocs config/crd/bases docs/api.md

.PHONY: generate
generate: ## Generate the DeepCopy methods of the API types.
	@hack/build-tools.sh controller-gen
	$(BIN)/controller-gen object:headerFile="hack/boilerplate.go.txt" paths="./..."
