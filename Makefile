# redisguard: the commands a newcomer needs. `make demo` needs only Go;
# `make test` also wants redis-server (the real-server tests skip without it,
# unless REDISGUARD_REQUIRE_SERVER=1).
GO      ?= go
PKGS    ?= ./...

.PHONY: test bench bench-cost bench-scale scenarios chaos goredis-suite lint demo

# The long real-server tests that mostly wait (sideBySide in scenario_test.go)
# run three at a time, which keeps CI within 15 minutes on two cores.
test:
	$(GO) test -race -count=1 -parallel 3 -timeout 20m $(PKGS)

# Benchmarks of both clients side by side (they skip without redis-server),
# then the interleaved healthy-path ratio check against go-redis alone.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	REDISGUARD_BENCH=1 $(GO) test -count=1 -v -run '^(TestHealthyPathRatio|TestReplicaHealthyPathRatio|TestAutoPipelineRatio)$$' .

# The healthy path's cost split into its parts (connection tracking, the
# rest of redisguard) at 64 and 512 callers on a standalone server, as rate
# ratios and CPU time per call. About 90 seconds.
bench-cost:
	REDISGUARD_BENCH_COST=64,512 $(GO) test -count=1 -v -run '^TestBenchCost$$' .

# Cost curves beside go-redis: callers, pipeline length, cluster size (3, 6
# and 12 masters started locally), idle cost and topology refresh. About 50
# minutes; rewrites the generated section of docs/performance.md and its
# charts. REDISGUARD_BENCH_SCALE=quick runs a short smoke version.
bench-scale:
	REDISGUARD_BENCH_SCALE=1 $(GO) test -count=1 -v -timeout 90m -run '^TestBenchScale$$' .

# The fault scenarios at full length, without -race, with the issues' strict
# targets; the README's figures come from here.
scenarios:
	REDISGUARD_SCENARIO=full $(GO) test -count=1 -v -timeout 30m -run 'Scenario' .

# The chaos soak at full length: 60s of mixed faults on a real cluster, with
# -race; prints the seed (REDISGUARD_CHAOS_SEED replays it) and the
# invariants report. `make test` runs the same soak with 20s of faults.
chaos:
	REDISGUARD_CHAOS=60s $(GO) test -race -count=1 -v -run TestChaos -timeout 20m .

# go-redis v9.23.0's own Ginkgo suite, run with go-redis alone and through
# redisguard, compared spec by spec (docs/migrating.md records the result).
# Not part of `make test`: about seven minutes, on the suite's fixed ports;
# needs redis-server, redis-cli and jq. WORK=DIR keeps the copies and reports.
goredis-suite:
	bash internal/goredissuite/run.sh $(WORK)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

demo:
	$(GO) run ./cmd/redisguard demo
