#!/usr/bin/env bash
# run.sh [WORK]: go-redis v9.23.0's own Ginkgo suite, run once with go-redis
# alone and once with a *redisguard.Client in place of the client under
# test, compared spec by spec. Not part of `make test`: it takes about seven
# minutes (two runs of about three, with building and servers) and the fixed ports of go-redis's suite
# (servers.sh).
#
# Needs redis-server and redis-cli (7.0 or later), jq, and go-redis v9.23.0
# in the module cache (`go mod download` in this repository). WORK (default
# /tmp/goredissuite) receives two copies of go-redis's module: base/, as
# released, and guard/, ported as below, with this working tree as
# redisguard (a replace directive). Results: WORK/{base,guard}.json (Ginkgo's
# reports), WORK/{base,guard}.tsv (state, spec, file, the start of the
# failure) and WORK/differences.tsv, the specs that pass with go-redis and
# not through redisguard. docs/migrating.md records the last run.
# REDISGUARD=DIR runs another copy of redisguard (an older commit, from git
# archive) in place of this working tree; RUNS=guard reruns redisguard's
# side alone, keeping WORK/base.tsv from an earlier run.
#
# The port is what a user's would be, done by rewriting the spec files listed
# below (nothing else changes):
#   - redis.NewClient(opt) and redis.NewClusterClient(opt) become
#     guardNewClient(opt) and guardNewClusterClient(opt)
#     (testdata/redisguard_port_test.go): the same options, field by field, in
#     a redisguard.Config; a refused Config fails the spec with the reason;
#   - the variables holding them become *redisguard.Client;
#   - the methods of *redis.Client and *redis.ClusterClient that a Client
#     does not have (Conn, Options, DoRaw, MasterForKey, ...) are called on
#     the go-redis client it runs (goredisOf(c), c.ClusterClient()), whose
#     hooks are redisguard's.
# Admin clients (the suite's BeforeSuite, the cluster scenario's per-node
# clients, the callbacks of ForEachMaster) stay go-redis clients.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-/tmp/goredissuite}
rgdir=${REDISGUARD:-$repo}
src=$(cd "$repo" && go env GOMODCACHE)/github.com/redis/go-redis/v9@v9.23.0
[ -d "$src" ] || (cd "$repo" && go mod download github.com/redis/go-redis/v9)

# The spec files ported: standalone (a *redis.Client under test) and cluster
# (a *redis.ClusterClient under test; race_test.go has both).
standalone="redis_test.go commands_test.go pipeline_test.go pubsub_test.go tx_test.go tx_unwatch_test.go
	pool_test.go race_test.go iterator_test.go bitmap_commands_test.go acl_commands_test.go command_test.go
	script_server_sha_integration_test.go"
cluster="osscluster_test.go race_test.go"
# Methods of *redis.Client, and the variables the specs call them on, that a
# *redisguard.Client reaches through goredisOf.
clientMethods='DoRaw|DoRawWriteTo|Pool|Conn|Options|WithTimeout|WaitAOF|Wait|EphemeralConn|String'
clientVars='client|rawClient|clientAcl|db|db0|db2|custom|other|c|client2'
# Methods of *redis.ClusterClient a *redisguard.Client reaches through
# ClusterClient().
clusterMethods='SwapNodes|Nodes|LoadState|Wait|SlaveForKey|MasterForKey|SetCommandInfoResolver|NewDynamicResolver|ReloadState'

copy() {
	rm -rf "$work/$1"
	cp -r "$src" "$work/$1"
	chmod -R u+w "$work/$1"
}

port() {
	local d=$work/guard f
	cp "$here/testdata/redisguard_port_test.go" "$d/zz_redisguard_port_test.go"
	printf '\nrequire github.com/redisguard/redisguard v0.0.0\n\nreplace github.com/redisguard/redisguard => %s\n' "$rgdir" >>"$d/go.mod"
	# The command suites take their subject as a UniversalClient.
	perl -pi -e 's/^func newUniversalSubject\(c \*redis\.Client\)/func newUniversalSubject(c redis.UniversalClient)/' "$d/main_test.go"
	for f in $(echo $standalone $cluster | tr " " "\n" | sort -u); do
		perl -pi -e 's#^(\s*)"github.com/redis/go-redis/v9"$#$1"github.com/redis/go-redis/v9"\n$1"github.com/redisguard/redisguard"#' "$d/$f"
		echo 'var _ *redisguard.Client' >>"$d/$f"
	done
	for f in $standalone; do
		perl -pi -e '
			s/\bredis\.NewClient\(/guardNewClient(/g;
			s/\*redis\.Client\b/*redisguard.Client/g unless /func\(ctx context\.Context, \w+ \*redis\.Client\)/;
			s/\b('"$clientVars"')\.('"$clientMethods"')\(/goredisOf($1).$2(/g;
			s/\bskipIfClientTrackingUnavailable\(ctx, (\w+)\)/skipIfClientTrackingUnavailable(ctx, goredisOf($1))/g;
			s/\bWaitForIndexing\((\w+),/WaitForIndexing(goredisOf($1),/g;
		' "$d/$f"
	done
	for f in $cluster; do
		perl -pi -e '
			s/\bredis\.NewClusterClient\(/guardNewClusterClient(/g;
			s/\*redis\.ClusterClient\b/*redisguard.Client/g;
			s/\b(?!wg\b)(\w+)\.('"$clusterMethods"')\(/$1.ClusterClient().$2(/g;
		' "$d/$f"
	done
	(cd "$d" && go mod tidy >/dev/null && go vet . >/dev/null)
}

# run NAME: the suite in WORK/NAME on fresh servers, report in WORK/NAME.json.
run() {
	"$here/servers.sh" stop "$work/data" || true
	rm -rf "$work/data"
	"$here/servers.sh" start "$work/data"
	(cd "$work/$1" && REDIS_VERSION=7.0 go test -count=1 -timeout 40m -run '^TestGinkgoSuite$' . \
		-ginkgo.seed=1 -ginkgo.no-color -ginkgo.json-report="$work/$1.json" >"$work/$1.log" 2>&1) || true
	"$here/servers.sh" stop "$work/data"
	jq -r '.[0].SpecReports[] | select(.LeafNodeType == "It") |
		[.State, ((.ContainerHierarchyTexts + [.LeafNodeText]) | join(" / ")),
		 (.LeafNodeLocation.FileName | split("/") | last),
		 ((.Failure.ForwardedPanic // .Failure.Message // "") | gsub("\\s+"; " ") | .[0:240])] | @tsv' \
		"$work/$1.json" | sort -t$'\t' -k2 >"$work/$1.tsv"
}

# main is called on the last line, so that bash has read the whole script
# before it runs: editing it meanwhile does not change a run in progress.
main() {
	mkdir -p "$work"
	trap '"$here/servers.sh" stop "$work/data"' EXIT
	for r in ${RUNS:-base guard}; do
		copy "$r"
		[ "$r" = guard ] && port
		run "$r"
	done

	# Specs that pass with go-redis and not through redisguard, with the file and
	# redisguard's failure.
	join -t$'\t' -1 2 -2 2 -o 1.3,2.1,1.2,2.4 \
		<(awk -F'\t' '$1 == "passed"' "$work/base.tsv" | sort -t$'\t' -k2) \
		<(sort -t$'\t' -k2 "$work/guard.tsv") |
		awk -F'\t' '$2 != "passed"' | sort >"$work/differences.tsv"
	for n in base guard; do
		printf '%s: ' "$n"
		cut -f1 "$work/$n.tsv" | sort | uniq -c | tr '\n' ' '
		echo
	done
	echo "passing with go-redis, not through redisguard, by file:"
	cut -f1 "$work/differences.tsv" | uniq -c
	echo "list: $work/differences.tsv"
}

main
