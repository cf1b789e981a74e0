package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redisproc"
)

// Settings shared by both sides, so that the only difference between the
// two columns is redisguard. The timeouts are an ordinary production value
// chosen to make the difference visible within seconds; every setting of
// redisguard's own (breaker, hang watch, recovery) keeps its default.
const (
	demoTimeout = time.Second // dial, read and write timeout
	demoKeys    = 1200        // keys in the workload
	demoShards  = 3           // servers in the embedded demo
)

// backend is what the demo runs against: three nodes the two sides can
// reach, and a fault it can switch on and off for one of them.
type backend interface {
	// describe says what runs, for the header.
	describe() string
	// faultName names the fault, for the table, the verdict and the chart.
	faultName() string
	// faultDetail says what the fault does, for the header.
	faultDetail() string
	// nodes names the nodes in the plural ("servers", "masters"), and
	// sickNode the sick one ("the hung server").
	nodes() string
	sickNode() string
	// sickAddr is the sick node's address as redisguard's events name it.
	sickAddr() string
	keys() *keyspace
	// clients builds the two sides with the same settings.
	clients(workers int, onEvent func(redisguard.Event)) (stock, guard fleet, err error)
	fault() error
	heal() error
	close() error
}

// fleet is one side of the demo: the clients its callers use. A key is
// read through the client of the node that holds it (shardOf); a cluster
// side has one client, which routes by itself.
type fleet []redis.UniversalClient

// shardOf is the index of the server of n that holds key in the embedded
// demo: the way a service that shards over standalone servers picks one.
func shardOf(key string, n int) int {
	return int(crc32.ChecksumIEEE([]byte(key)) % uint32(n))
}

func (f fleet) get(ctx context.Context, key string) error {
	return f[shardOf(key, len(f))].Get(ctx, key).Err()
}

// warm opens n connections per client before the clock starts, as a
// service that has been running would have them: n PINGs at once each.
func (f fleet) warm(ctx context.Context, n int) error {
	errs := make(chan error, n*len(f))
	for _, c := range f {
		for range n {
			go func() { errs <- c.Ping(ctx).Err() }()
		}
	}
	var err error
	for range n * len(f) {
		err = errors.Join(err, <-errs)
	}
	return err
}

func (f fleet) close() error {
	var err error
	for _, c := range f {
		err = errors.Join(err, c.Close())
	}
	return err
}

// sharded is three miniredis servers, each behind a fault proxy, with the
// keys spread over them by shardOf. Each side has one client per proxy, as
// a service that shards its keys over standalone servers does; the fault
// blackholes the first proxy. It needs nothing but Go.
type sharded struct {
	srvs    []*miniredis.Miniredis
	proxies []*faultproxy.Proxy
	ks      keyspace
}

func startSharded() (*sharded, error) {
	s := &sharded{}
	for range demoShards {
		srv := miniredis.NewMiniRedis()
		if err := srv.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("starting miniredis: %w", err), s.close())
		}
		s.srvs = append(s.srvs, srv)
		proxy, err := faultproxy.New(srv.Addr())
		if err != nil {
			return nil, errors.Join(err, s.close())
		}
		s.proxies = append(s.proxies, proxy)
	}
	for i := range demoKeys {
		key := "demo:key:" + strconv.Itoa(i)
		shard := shardOf(key, demoShards)
		if err := s.srvs[shard].Set(key, "value-"+strconv.Itoa(i)); err != nil {
			return nil, errors.Join(err, s.close())
		}
		if shard == 0 {
			s.ks[groupSick] = append(s.ks[groupSick], key)
		} else {
			s.ks[groupHealthy] = append(s.ks[groupHealthy], key)
		}
	}
	return s, nil
}

func (s *sharded) describe() string {
	addrs := make([]string, len(s.proxies))
	for i, p := range s.proxies {
		addrs[i] = p.Addr()
	}
	return fmt.Sprintf("%d embedded Redis servers (miniredis), each behind a fault proxy (%s), with the keys "+
		"spread over them by a hash of the key; each side has one client per server", len(s.srvs), strings.Join(addrs, ", "))
}
func (s *sharded) faultName() string { return "server hung" }
func (s *sharded) faultDetail() string {
	return fmt.Sprintf("the proxy at %s swallows every byte and answers nothing, as a hung server does, "+
		"and keeps its connections open: a third of the keys hang, the other two servers stay healthy", s.sickAddr())
}
func (s *sharded) nodes() string    { return "servers" }
func (s *sharded) sickNode() string { return "the hung server" }
func (s *sharded) sickAddr() string { return s.proxies[0].Addr() }
func (s *sharded) keys() *keyspace  { return &s.ks }
func (s *sharded) fault() error     { return s.proxies[0].SetMode(faultproxy.Blackhole) }
func (s *sharded) heal() error      { return s.proxies[0].SetMode(faultproxy.Pass) }

func (s *sharded) clients(workers int, onEvent func(redisguard.Event)) (fleet, fleet, error) {
	var stock, guard fleet
	for _, p := range s.proxies {
		st, g, err := demoClients([]string{p.Addr()}, workers, onEvent)
		if err != nil {
			return nil, nil, errors.Join(err, stock.close(), guard.close())
		}
		stock, guard = append(stock, st), append(guard, g)
	}
	return stock, guard, nil
}

func (s *sharded) close() error {
	var err error
	for _, p := range s.proxies {
		err = errors.Join(err, p.Close())
	}
	for _, srv := range s.srvs {
		srv.Close()
	}
	return err
}

// demoClients builds go-redis alone and redisguard for the same addresses,
// with the same pool and timeouts. go-redis's universal constructor picks a
// cluster client for several seed addresses and a plain one for one.
func demoClients(addrs []string, workers int, onEvent func(redisguard.Event)) (redis.UniversalClient, *redisguard.Client, error) {
	stock := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: addrs, PoolSize: workers,
		DialTimeout: demoTimeout, ReadTimeout: demoTimeout, WriteTimeout: demoTimeout,
	})
	guard, err := redisguard.NewClient(guardConfig(addrs, workers, onEvent))
	if err != nil {
		_ = stock.Close()
		return nil, nil, err
	}
	return stock, guard, nil
}

// guardConfig is redisguard's side of the shared settings; the rest of
// Config is left at its defaults.
func guardConfig(addrs []string, workers int, onEvent func(redisguard.Event)) redisguard.Config {
	return redisguard.Config{
		Addrs: addrs, MaxConnections: workers,
		DialTimeout: demoTimeout, ReadTimeout: demoTimeout, WriteTimeout: demoTimeout,
		OnEvent: onEvent,
	}
}

// realCluster is three redis-server masters; the fault pauses the first
// (SIGSTOP), so a third of the keys hang and two thirds stay healthy.
type realCluster struct {
	c    *redisproc.Cluster
	sick *redisproc.Server
	ks   keyspace
}

// clusterNodeTimeout is far above the demo's hang, so the healthy masters
// keep serving: this is a hang, not a failover, and with no replicas a node
// flagged as failed would take the whole cluster down.
const clusterNodeTimeout = time.Minute

func startCluster(bin string) (*realCluster, error) {
	c, err := redisproc.Env{Bin: bin}.StartCluster(redisproc.ClusterOptions{Masters: 3, NodeTimeout: clusterNodeTimeout})
	if err != nil {
		return nil, err
	}
	rc := &realCluster{c: c, sick: c.Masters[0]}
	if err := rc.seed(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return rc, nil
}

// seed writes the keys through each master's admin client, grouped by
// whether the master to be paused owns them.
func (rc *realCluster) seed() error {
	owners, err := rc.c.SlotOwners()
	if err != nil {
		return err
	}
	byOwner := map[string][]string{}
	for i := range demoKeys {
		key := "demo:key:" + strconv.Itoa(i)
		owner := owners[redisproc.Slot(key)]
		byOwner[owner] = append(byOwner[owner], key)
		if owner == rc.sick.Addr {
			rc.ks[groupSick] = append(rc.ks[groupSick], key)
		} else {
			rc.ks[groupHealthy] = append(rc.ks[groupHealthy], key)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for owner, keys := range byOwner {
		n := rc.c.Node(owner)
		if n == nil {
			return fmt.Errorf("slot owner %s is not a node of the cluster", owner)
		}
		_, err := n.Admin().Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Set(ctx, k, "value", 0)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("seeding %s: %w", owner, err)
		}
	}
	return nil
}

func (rc *realCluster) describe() string {
	return fmt.Sprintf("a Redis Cluster of 3 masters (redis-server) at %v; each side has one cluster client", rc.c.Addrs())
}
func (rc *realCluster) faultName() string { return "master paused" }
func (rc *realCluster) faultDetail() string {
	return fmt.Sprintf("master %s is frozen with SIGSTOP: a third of the keys hang, the other two masters stay healthy", rc.sick.Addr)
}
func (rc *realCluster) nodes() string    { return "masters" }
func (rc *realCluster) sickNode() string { return "the paused master" }
func (rc *realCluster) sickAddr() string { return rc.sick.Addr }
func (rc *realCluster) keys() *keyspace  { return &rc.ks }
func (rc *realCluster) fault() error     { return rc.sick.Pause() }
func (rc *realCluster) heal() error      { return rc.sick.Resume() }
func (rc *realCluster) close() error     { return rc.c.Close() }

func (rc *realCluster) clients(workers int, onEvent func(redisguard.Event)) (fleet, fleet, error) {
	stock, guard, err := demoClients(rc.c.Addrs(), workers, onEvent)
	if err != nil {
		return nil, nil, err
	}
	return fleet{stock}, fleet{guard}, nil
}
