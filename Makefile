# redisguard: the commands a newcomer needs. `make demo` needs only Go;
# `make test` also wants redis-server (the real-server tests skip without it,
# unless REDISGUARD_REQUIRE_SERVER=1).
GO      ?= go
PKGS    ?= ./...

.PHONY: test bench lint demo

test:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo:
	$(GO) run ./cmd/redisguard demo
