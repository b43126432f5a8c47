# syncd's commands. `make run` and `make test` are the README's quick start.
# Go code comes from the Go module proxy; cgo (gcc) builds SQLite; `make deps`
# installs Debian's chromium for the browser test (apt-get).

GO        ?= go
export CGO_ENABLED := 1

BIN       := bin
FUZZTIME  ?= 20000x
BENCHTIME ?= 2s
SOAK_DURATION ?= 10m
SOAK_ARGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run build deps rules test abuse bench peerbench fuzz lint clean soak cluster cluster-node cluster-kill cluster-stop cluster-test cluster-chaos simulate knee scale

# Root installs packages directly; anyone else through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

## run: build syncd and start it on 127.0.0.1:8080 with its SQLite database and token
## file under ./var/ (VAR=DIR puts them elsewhere)
VAR ?= var
run: build
	mkdir -p $(VAR)
	@echo "JWT sign-in without an identity provider: ./$(BIN)/syncctl jwt keygen; then"
	@echo "  make run ARGS='--jwt-jwks-file var/jwt/jwks.json --jwt-issuer syncd-dev --jwt-audience syncd'"
	@echo "  ./$(BIN)/syncctl jwt sign --sub alice --tenant dev > var/alice.jwt"
	@echo "  go run ./examples/notes --jwt var/alice.jwt --client-id alice:laptop add k v"
	./$(BIN)/syncd --data $(VAR)/syncd.db --tokens $(VAR)/tokens.json --dev-tokens $(ARGS)

# The build names its source revision (syncd --version, welcome, syncd_build_info)
# even where the toolchain's own VCS stamping is off.
REVISION := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
VERSION  := $(shell git describe --tags --match 'v*' 2>/dev/null)
LDFLAGS  := -X github.com/syncd-dev/syncd/internal/buildinfo.linkedRevision=$(REVISION) $(if $(VERSION),-X github.com/syncd-dev/syncd/internal/buildinfo.linkedVersion=$(VERSION))

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

## cluster: three syncd nodes on loopback (tools/devcluster), each with an embedded NATS
## server, its own data directory under var/cluster/ and a pidfile; they share one token
## file and one cluster secret (created when missing). Prints each node's pid and URLs;
## Ctrl-C or TERM stops all three. make cluster-node N=2 restarts one node in place,
## make cluster-kill N=2 kills it (-9), make cluster-stop stops every node.
cluster: build
	@BIN=$(BIN) VAR=$(VAR) ARGS="$(ARGS)" exec tools/devcluster up

N ?= 1
cluster-node: build
	@BIN=$(BIN) VAR=$(VAR) ARGS="$(ARGS)" tools/devcluster node $(N)

cluster-kill:
	@VAR=$(VAR) tools/devcluster kill $(N)

cluster-stop:
	@VAR=$(VAR) tools/devcluster stop

## deps: what the suite needs beyond Go and gcc: Debian's chromium, for the test
## that connects a real browser to syncd (server/browser_test.go), and Debian's
## prometheus package for promtool (make rules)
deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser test"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "installing Debian's prometheus for promtool (the alert rules' checks)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

## test: vet, the whole suite with the race detector (./soak holds the short soaks, single
## node and three-node cluster, about a minute each; ./cmd/syncd the cluster's process-level
## proofs, about three minutes), then make scale (the server's tests at scale, without the
## race detector; about a minute), then tools/walkthrough-check (the README's quick start,
## the example app and make cluster, run as written; about a minute), then the client's seeded simulation at its full 10,000
## schedules without the race detector (which slows it tenfold)
test: deps rules
	$(GO) vet ./...
	$(GO) test -race -timeout 14m ./...
	$(MAKE) --no-print-directory scale
	tools/walkthrough-check
	$(GO) test -count=1 -run 'TestSimulation$$' -v ./client/synccore

## scale: the server's tests that prove a figure at scale (issue 21's partial sync: 100,000
## rows beside an added value, 10,000 scoped writes, the grant races over every seed), at
## full scale without the race detector; under it (make test's first pass) they run at a
## fifth to a tenth of it, which the detector slows five to tenfold
scale:
	$(GO) test -count=1 -timeout 10m -run '^(TestScopeAddedWithoutResyncBesideAHundredThousandRows|TestScopedDevicesAtScaleReceiveExactlyTheirValues|TestScopedRacesEndEqualToTheFilteredServer)$$' ./server
	$(GO) test -count=1 -timeout 10m -run '^TestBehaviourInACluster$$/^ScopeAddedWithoutResyncBesideAHundredThousandRows$$' ./server

## rules: check the Prometheus rules (docs/alerts/syncd.rules.yml) and run their tests
## (input series and the recordings and alerts they must give)
rules: deps
	promtool check rules docs/alerts/syncd.rules.yml
	cd docs/alerts && promtool test rules syncd.rules.test.yml

## console-screenshots: run the console's browser test (server/console) with headless
## Chromium (single node and a three-node cluster) and write a PNG of every console page to
## docs/console/ (not part of make test)
.PHONY: console-screenshots
console-screenshots: deps
	mkdir -p docs/console
	SYNCD_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run 'TestConsoleInABrowser$$|TestConsoleTokensInABrowser$$|TestConsoleClusterPageShowsANodeDown$$' ./server/console

## simulate: the client's seeded simulation (client/synccore) over SEEDS schedules
## (default 100000), without the race detector; a failing seed prints its replay command
SEEDS ?= 100000
simulate:
	$(GO) test -count=1 -run 'TestSimulation$$' -timeout 60m ./client/synccore -sim.seeds=$(SEEDS)

## abuse: the abuse suite (server/abuse_test.go) with ABUSE_SCALE (default 10) times the
## counts `make test` runs it with; the tests of issue 11's findings that live beside the
## code they check (ABUSE_SERVER: a revoked token's sessions, profiles behind the admin
## token; ABUSE_ELSEWHERE: development tokens, the admin listener, human output, queue
## paths, private files, the client's trust in its server, ill-formed keys); and the RSS
## benchmark of the parallel-frame flood (no race detector, one round)
ABUSE_SCALE ?= 10
ABUSE_SERVER = TestRevokedTokenClosesItsSessions|TestProfilesNeedTheAdminToken
ABUSE_ELSEWHERE = TestMissingTokenFileNeedsDevTokens|TestAdminListenerOffLoopbackNeedsTLS|TestAdminListenerServesTLS|TestEveryListenerCapsConnectionsPerAddress|TestHumanOutputEscapesData|TestOpenRefusesNonRegularPaths|TestCreatedFilesArePrivate|TestOpenCreatesFilesOwnerOnly|TestObserveRefusesTimestampsFarAhead|TestSnapshotIsBoundedInBytes|TestRelinkBacksOffAfterQuickLosses|TestKeysWithLoneSurrogatesAreRefused
ABUSE_PACKAGES = ./cmd/syncd/ ./cmd/syncctl/ ./client/ ./client/offlinequeue/ ./internal/sqlitedb/ ./syncproto/
abuse:
	SYNCD_ABUSE_SCALE=$(ABUSE_SCALE) $(GO) test -race -count=1 -run 'Abuse|$(ABUSE_SERVER)' -timeout 20m -v ./server/
	$(GO) test -race -count=1 -run '^($(ABUSE_ELSEWHERE))$$' -v $(ABUSE_PACKAGES)
	$(GO) test -count=1 -run '^$$' -bench 'BenchmarkAbuse' -benchtime 1x -timeout 20m ./server/

## soak: the long churn run (SOAK_DURATION, default 10m; SOAK_NODES, default 1: with 3, a
## syncd cluster with node kills and route cuts; SOAK_ARGS for more flags, e.g. --seed N to
## replay); it stops by itself and writes var/soak/<time>/report.md
SOAK_NODES ?= 1
soak:
	mkdir -p var/soak
	$(GO) build -o $(BIN)/ ./cmd/syncd ./soak/cmd/soak
	./$(BIN)/soak --duration $(SOAK_DURATION) --syncd ./$(BIN)/syncd --out var/soak --nodes $(SOAK_NODES) $(SOAK_ARGS)

## cluster-test: only the cluster's process-level proofs, which `make test` also runs: three
## syncd OS processes with kill -9 of leader and followers (4 kills here, 2 in `make test`), a
## node cut off by its routes, a node restored from a snapshot onto an empty disk, bad
## configurations, and the short cluster soak (3 nodes, node kills and route cuts among the
## faults). About 5 minutes on 2 cores.
cluster-test:
	SYNCD_CLUSTER_KILLS=4 $(GO) test -race -count=1 -timeout 40m -v -run 'TestClusterProcess|TestShortClusterSoak' ./cmd/syncd/ ./soak/

## cluster-chaos: three syncd processes (R3) under writers, CLUSTER_KILLS (default 20) kill -9s
## of the stream leader and of followers; prints the writers' resume-time distribution
CLUSTER_KILLS ?= 20
cluster-chaos:
	SYNCD_CLUSTER_KILLS=$(CLUSTER_KILLS) $(GO) test -race -count=1 -run 'TestClusterProcessKills' -timeout 40m -v ./cmd/syncd/

## bench: the benchmark suite, each beside its ceiling measured in the same run, as a table,
## then the fan-out knee of the built binary at its defaults (runs of KNEE_DURATION)
## (SCOPED_N: the tenant's rows around BenchmarkScopedSnapshot's 1,000; its build takes about two minutes)
KNEE_DURATION ?= 20s
SCOPED_N ?= 1000000
bench: peerbench build
	mkdir -p var
	SYNCD_BENCH_SCOPED_N=$(SCOPED_N) $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m ./... | tee var/bench.txt
	$(GO) run ./tools/benchtable < var/bench.txt
	@BIN=$(BIN) VAR=$(VAR) DURATION=$(KNEE_DURATION) tools/knee/knee.sh | tee var/knee.txt

## peerbench: PouchDB (pinned in tools/peerbench/package-lock.json), the peer the
## awaited-write and backlog-replay benchmarks are measured beside in the same run
peerbench: tools/peerbench/node_modules/.package-lock.json

tools/peerbench/node_modules/.package-lock.json: tools/peerbench/package-lock.json
	cd tools/peerbench && npm ci --omit=optional --no-audit --no-fund
	touch $@

## knee: the fan-out knee at syncd's defaults (tools/knee/knee.sh): the built syncd
## started as users start it, 1,000 subscribed devices and 100 pushers, syncctl bench
## --find-knee searching the highest open-loop rate with push-ack p99 < 100 ms and
## feed-delivery p99 < 250 ms (at most 12 runs of DURATION, 10s by default)
knee: build
	@BIN=$(BIN) VAR=$(VAR) tools/knee/knee.sh

## fuzz: every fuzz target for FUZZTIME executions each (count-based: duration-based
## fuzzing can end with a spurious "context deadline exceeded" in the Go coordinator)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## lint: formatting, vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf $(BIN) var
