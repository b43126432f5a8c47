# syncd's commands. `make run` and `make test` are the README's quick start.
# Everything they need comes from the Go module proxy; cgo (gcc) builds SQLite.

GO        ?= go
export CGO_ENABLED := 1

BIN       := bin
FUZZTIME  ?= 20000x
BENCHTIME ?= 2s
SOAK_DURATION ?= 10m
SOAK_ARGS ?=
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run build test bench fuzz lint clean soak

## run: build syncd and start it on 127.0.0.1:8080 with its SQLite database under ./var/
run: build
	mkdir -p var
	./$(BIN)/syncd --data var/syncd.db $(ARGS)

build:
	$(GO) build -o $(BIN)/ ./cmd/...

## test: vet and the whole suite with the race detector (./soak holds the short soak, about a minute)
test:
	$(GO) vet ./...
	$(GO) test -race -timeout 14m ./...

## soak: the long churn run (SOAK_DURATION, default 10m; SOAK_ARGS for more flags, e.g.
## --seed N to replay); it stops by itself and writes var/soak/<time>/report.md
soak:
	mkdir -p var/soak
	$(GO) build -o $(BIN)/ ./cmd/syncd ./soak/cmd/soak
	./$(BIN)/soak --duration $(SOAK_DURATION) --syncd ./$(BIN)/syncd --out var/soak $(SOAK_ARGS)

## bench: the benchmark suite, each beside its ceiling measured in the same run, as a table
bench:
	mkdir -p var
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 30m ./... | tee var/bench.txt
	$(GO) run ./tools/benchtable < var/bench.txt

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
