#!/usr/bin/env bash
# servers.sh start|stop DIR: the local servers go-redis v9.23.0's Ginkgo suite
# expects in place of its docker-compose set-up, on its fixed ports, all on
# 127.0.0.1 with data under DIR. The suite itself joins the six cluster nodes
# (configureClusterTopology) and points the sentinels' replicas at their master.
#
#   6379               standalone ("redis-stack" in the suite; no modules here)
#   6390-6392          ring shards
#   9121, 9122-9123    sentinel master and its replicas
#   26379-26381        sentinels monitoring go-redis-test at 9121
#   16600-16605        cluster nodes (cluster-enabled, empty)
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?data directory}
plain=(6379 6390 6391 6392 9121 9122 9123)
cluster=(16600 16601 16602 16603 16604 16605)
sentinels=(26379 26380 26381)

start() {
	mkdir -p "$dir"
	for p in "${plain[@]}"; do
		mkdir -p "$dir/$p"
		redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --save '' --appendonly no \
			--enable-debug-command yes --enable-module-command yes \
			--daemonize yes --pidfile "$dir/$p/pid" --logfile "$dir/$p/log"
	done
	for p in "${cluster[@]}"; do
		mkdir -p "$dir/$p"
		rm -f "$dir/$p/nodes.conf"
		redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --save '' --appendonly no \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
			--enable-debug-command yes \
			--daemonize yes --pidfile "$dir/$p/pid" --logfile "$dir/$p/log"
	done
	for p in "${sentinels[@]}"; do
		mkdir -p "$dir/$p"
		cat >"$dir/$p/sentinel.conf" <<CONF
port $p
bind 127.0.0.1
daemonize yes
pidfile $dir/$p/pid
logfile $dir/$p/log
dir $dir/$p
sentinel resolve-hostnames yes
sentinel monitor go-redis-test 127.0.0.1 9121 2
sentinel down-after-milliseconds go-redis-test 5000
sentinel failover-timeout go-redis-test 60000
sentinel parallel-syncs go-redis-test 1
CONF
		redis-server "$dir/$p/sentinel.conf" --sentinel
	done
	for p in "${plain[@]}" "${cluster[@]}" "${sentinels[@]}"; do
		for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
	done
}

stop() {
	for p in "${plain[@]}" "${cluster[@]}" "${sentinels[@]}"; do
		[ -f "$dir/$p/pid" ] && kill "$(cat "$dir/$p/pid")" 2>/dev/null || true
	done
	sleep 0.5
}

case $cmd in
start) start ;;
stop) stop ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
