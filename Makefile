# The README's commands. Everything a fresh machine needs is installed here:
# Go modules through the module proxy, and from npm the third-party Cosmos DB
# server (pinned in tools/cosmosdb-server) and Microsoft's JavaScript SDK
# (pinned in tools/azure-cosmos) into the git-ignored .tools folder.

GO            ?= go
TOOLS         := $(CURDIR)/.tools
NPM_SERVER    := $(TOOLS)/cosmosdb-server
NPM_SERVER_JS := $(NPM_SERVER)/node_modules/@vercel/cosmosdb-server/lib/cli.js
JS_SDK        := $(TOOLS)/azure-cosmos
JS_SDK_PKG    := $(JS_SDK)/node_modules/@azure/cosmos/package.json
# The timeout guards against a hang, not a slow host: the root package takes
# about 11 minutes alone under -race on 2 cores, and 20 with three runs at once.
# Its six runs of the validation suite mostly wait (locks expiring, polls) and
# run side by side: -parallel lets their tests overlap beyond one per core.
GOTESTFLAGS   ?= -race -count=1 -timeout 45m -parallel 6
# The root module builds on its own go.mod, the module graph its users get:
# go.work, there for otelcdb and its example, would add their requirements to
# it (and ask for their Go version). otelcdb and its example build in the
# workspace, against the cdb beside them, since they require a cdb release
# that may not be tagged yet (docs/releasing.md).
ROOTGO        := GOWORK=off $(GO)
WORKGO        := GOWORK=$(CURDIR)/go.work $(GO)

.PHONY: test test-unit test-otelcdb lint tidy emulator demo sdk-compat ui-browser soak tools clean

## test: every suite, on the in-memory fake and on @vercel/cosmosdb-server (and on COSMOS_ENDPOINT when set),
## and @azure/cosmos against `cdb emulator` (internal/jscompat), and cdb ui in headless Chromium (internal/uibrowser)
test: lint $(NPM_SERVER_JS) $(JS_SDK_PKG)
	CDB_COSMOSDB_SERVER_CLI=$(NPM_SERVER_JS) CDB_AZURE_COSMOS_MODULES=$(JS_SDK)/node_modules $(ROOTGO) test $(GOTESTFLAGS) ./...
	$(MAKE) sdk-compat
	$(MAKE) ui-browser
	$(MAKE) test-otelcdb

## test-unit: the suites on the in-memory fake only (no npm, no network), and otelcdb's
test-unit:
	$(ROOTGO) test $(GOTESTFLAGS) ./...
	$(MAKE) test-otelcdb

## test-otelcdb: the OpenTelemetry bridge and its exporting example (modules of their own, so the library does not depend on OpenTelemetry)
test-otelcdb:
	cd otelcdb && $(WORKGO) test $(GOTESTFLAGS) ./...
	cd otelcdb/example && $(WORKGO) test $(GOTESTFLAGS) ./...

## lint: no built binary or file over 1 MiB tracked, no replace in otelcdb's go.mod files (go.work replaces what they
## require), gofmt check, go vet (the root module and otelcdb)
lint:
	@./tools/check-tracked-files
	@GO=$(GO) ./tools/check-nested-modules
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(ROOTGO) vet ./...
	cd otelcdb && $(WORKGO) vet ./...
	cd otelcdb/example && $(WORKGO) vet ./...

## tidy: go mod tidy in every module; the nested ones see the cdb (and otelcdb) beside them through a
## replace that is dropped again, since tidy reads no go.work and their required release may not be tagged yet
tidy:
	$(ROOTGO) mod tidy
	cd otelcdb && $(GO) mod edit -replace github.com/duroxide-go/cdb=../ && \
		GOWORK=off $(GO) mod tidy; status=$$?; \
		$(GO) mod edit -dropreplace github.com/duroxide-go/cdb; exit $$status
	cd otelcdb/example && $(GO) mod edit -replace github.com/duroxide-go/cdb=../../ -replace github.com/duroxide-go/cdb/otelcdb=../ && \
		GOWORK=off $(GO) mod tidy; status=$$?; \
		$(GO) mod edit -dropreplace github.com/duroxide-go/cdb -dropreplace github.com/duroxide-go/cdb/otelcdb; exit $$status
	cd internal/sdkcompat && GOWORK=off $(GO) mod tidy
	cd internal/uibrowser && GOWORK=off $(GO) mod tidy

## emulator: serve the in-memory Cosmos DB on loopback (prints endpoint=... key=...)
emulator:
	$(ROOTGO) run ./cmd/cdb emulator $(ARGS)

## demo: the main job, on the embedded fake unless COSMOS_ENDPOINT is set
demo:
	$(ROOTGO) run ./cmd/cdb demo $(ARGS)

## sdk-compat: Microsoft's azcosmos SDK against `cdb emulator` (its own module, so the library does not depend on the SDK;
## it imports no cdb package and stays out of go.work, so the SDK's requirements never meet the workspace's)
sdk-compat:
	cd internal/sdkcompat && GOWORK=off $(GO) test -count=1 -timeout 10m ./...

## ui-browser: cdb ui in headless Chromium, driven by chromedp (its own module, outside go.work, as sdk-compat);
## installs Debian's chromium package when $(CHROMIUM) is missing and make runs as root, and fails saying what
## to install otherwise. UI_BROWSER_ARGS=-update rewrites docs/ui-timeline.png, the screenshot the README shows.
CHROMIUM ?= /usr/bin/chromium
ui-browser:
	@if [ ! -x "$(CHROMIUM)" ]; then \
		if [ "$$(id -u)" != 0 ]; then \
			echo "make ui-browser needs Chromium at $(CHROMIUM): as root, apt-get install -y --no-install-recommends chromium" \
				"(Debian's package), or set CHROMIUM to another Chromium binary"; \
			exit 1; \
		fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
		[ -x "$(CHROMIUM)" ] || { echo "Debian's chromium package did not install $(CHROMIUM): set CHROMIUM"; exit 1; }; \
	fi
	cd internal/uibrowser && CDB_CHROMIUM=$(CHROMIUM) GOWORK=off $(GO) test -count=1 -timeout 5m ./... $(if $(UI_BROWSER_ARGS),-args $(UI_BROWSER_ARGS))

## soak: the simulation for SOAK_SECONDS (default 60), in rounds of SOAK_ROUND_SECONDS (default 60)
## on fresh accounts, from SOAK_SEED (default random): every feature and fault at 5%, node crashes
## included; then the two-process scenario over
## `cdb emulator` for SOAK_PROCESS_SECONDS (default 30). SOAK_ALL=1 adds full-size fan-outs
## (up to 150 activities, multi-MB), SOAK_RATE changes the fault rate, SOAK_ENABLE toggles,
## SOAK_STRICT=1 fails on the pending invariants too. The soak alone bounds each of the
## harness's waits by a 5-minute hard cap; `go test` waits by the no-progress rule only.
SOAK_SECONDS         ?= 60
SOAK_ROUND_SECONDS   ?= 60
SOAK_PROCESS_SECONDS ?= 30
soak:
	@mkdir -p $(TOOLS)
	$(ROOTGO) build -o $(TOOLS)/cdb ./cmd/cdb
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_ROUND_SECONDS=$(SOAK_ROUND_SECONDS) SOAK_SEED=$(SOAK_SEED) $(ROOTGO) test -count=1 -v -timeout 0 -run 'TestSoak$$' ./internal/sim
	SOAK_PROCESS_SECONDS=$(SOAK_PROCESS_SECONDS) SOAK_SEED=$(SOAK_SEED) SIM_CDB_BIN=$(TOOLS)/cdb \
		$(ROOTGO) test -count=1 -v -timeout 0 -run 'TestSoakProcesses$$' ./internal/sim

tools: $(NPM_SERVER_JS) $(JS_SDK_PKG)

$(NPM_SERVER_JS): tools/cosmosdb-server/package.json tools/cosmosdb-server/package-lock.json
	@mkdir -p $(NPM_SERVER)
	cp tools/cosmosdb-server/package.json tools/cosmosdb-server/package-lock.json $(NPM_SERVER)/
	cd $(NPM_SERVER) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(JS_SDK_PKG): tools/azure-cosmos/package.json tools/azure-cosmos/package-lock.json
	@mkdir -p $(JS_SDK)
	cp tools/azure-cosmos/package.json tools/azure-cosmos/package-lock.json $(JS_SDK)/
	cd $(JS_SDK) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

clean:
	rm -rf $(TOOLS)
