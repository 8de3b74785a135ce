# fluffy — build, test, lint, demo. `make help` lists the targets.
GO       ?= go
PKG      := github.com/fluffy-agent/fluffy
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X $(PKG)/internal/buildinfo.version=$(VERSION) -X $(PKG)/internal/buildinfo.commit=$(COMMIT)
STATICCHECK_VERSION := v0.8.2
BIN      := bin/fluffy
GOBIN    ?= $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)

export CGO_ENABLED := 0
# The one place the goolm tag is set: mautrix's pure-Go olm (the Matrix
# channel's end-to-end encryption) for every build, vet, staticcheck and
# test below. A -tags flag on a command line replaces it (the front
# build, which links no Matrix code).
export GOFLAGS := $(strip $(GOFLAGS) -tags=goolm)

.PHONY: help build install deps test test-short stress lint demo bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/fluffy (the small client), bin/fluffy-core (full) and bin/fluffy-sandbox-init (static, CGO_ENABLED=0)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -tags fluffy_front -o $(BIN) ./cmd/fluffy
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)-core ./cmd/fluffy
	$(GO) build -trimpath -ldflags '-s -w' -o $(dir $(BIN))fluffy-sandbox-init ./cmd/fluffy-sandbox-init

install: build ## install the three binaries side by side into $GOBIN (default $GOPATH/bin)
	install -d "$(GOBIN)"
	install -m 0755 $(BIN) $(BIN)-core $(dir $(BIN))fluffy-sandbox-init "$(GOBIN)"

deps: ## install what the tests need on Debian (idempotent)
	bash scripts/deps.sh

test: deps build ## install test dependencies, then run every test
	$(GO) test -count=1 ./...

test-short: ## the quick tests (go test -short): no install; containers and the slowest suites skip, saying why
	$(GO) test -short ./...

stress: deps ## before a release: every test COUNT times (default 5) beside a busy loop per core; lists the failing tests and counts
	bash scripts/stress.sh

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags fluffy_front ./cmd/fluffy
	# A build without goolm compiles too (the daemon then refuses
	# serve.matrix): its tests must as well.
	$(GO) vet -tags '' ./internal/channel/matrix/...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags fluffy_front ./cmd/fluffy

demo: build ## fluffy demo: the red-green flow on a bundled example, scripted model, no API key
	bash scripts/demo.sh

bench: build ## run the Go benchmarks (see docs/benchmarks.md for the side-by-side ones)
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz: ## run each fuzz target for a short while
	bash scripts/fuzz.sh

clean:
	rm -rf bin
