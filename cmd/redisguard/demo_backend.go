package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redisproc"
)

// Settings shared by both clients, so that the only difference between the
// two columns is redisguard. They are chosen to make the difference visible
// within seconds, and are ordinary production values; the breaker's
// recovery keeps its default (NodeRecoveryTime 10s), as users do.
const (
	demoTimeout   = time.Second // dial, read and write timeout
	demoThreshold = 3           // NodeFailureThreshold
	demoKeys      = 1200        // keys in the workload
)

// backend is what the demo runs against: something the two clients can
// reach, and a fault it can switch on and off.
type backend interface {
	// describe says what runs, for the header.
	describe() string
	// faultName names the fault, for the table, the verdict and the chart.
	faultName() string
	// faultDetail says what the fault does, for the header.
	faultDetail() string
	keys() *keyspace
	// clients builds the two clients with the same settings.
	clients(workers int, onEvent func(redisguard.Event)) (stock redis.UniversalClient, guard *redisguard.Client, err error)
	fault() error
	heal() error
	close() error
}

// embedded is a miniredis behind one fault proxy, which both clients dial:
// a blackhole hits them in the same instant. It needs nothing but Go.
type embedded struct {
	srv   *miniredis.Miniredis
	proxy *faultproxy.Proxy
	ks    keyspace
}

func startEmbedded() (*embedded, error) {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("starting miniredis: %w", err)
	}
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		srv.Close()
		return nil, err
	}
	e := &embedded{srv: srv, proxy: proxy}
	for i := range demoKeys {
		key := "demo:key:" + strconv.Itoa(i)
		if err := srv.Set(key, "value-"+strconv.Itoa(i)); err != nil {
			_ = e.close()
			return nil, err
		}
		e.ks[groupSick] = append(e.ks[groupSick], key)
	}
	return e, nil
}

func (e *embedded) describe() string {
	return fmt.Sprintf("embedded Redis (miniredis) at %s, behind a fault proxy at %s", e.srv.Addr(), e.proxy.Addr())
}
func (e *embedded) faultName() string { return "server hung" }
func (e *embedded) faultDetail() string {
	return "the proxy swallows every byte and answers nothing; connections stay open, as with a hung server"
}
func (e *embedded) keys() *keyspace { return &e.ks }
func (e *embedded) fault() error    { return e.proxy.SetMode(faultproxy.Blackhole) }
func (e *embedded) heal() error     { return e.proxy.SetMode(faultproxy.Pass) }

func (e *embedded) clients(workers int, onEvent func(redisguard.Event)) (redis.UniversalClient, *redisguard.Client, error) {
	return demoClients([]string{e.proxy.Addr()}, workers, onEvent)
}

func (e *embedded) close() error {
	err := e.proxy.Close()
	e.srv.Close()
	return err
}

// guardConfig is redisguard's side of the shared settings.
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

func guardConfig(addrs []string, workers int, onEvent func(redisguard.Event)) redisguard.Config {
	return redisguard.Config{
		Addrs: addrs, MaxConnections: workers,
		DialTimeout: demoTimeout, ReadTimeout: demoTimeout, WriteTimeout: demoTimeout,
		NodeFailureThreshold: demoThreshold,
		OnEvent:              onEvent,
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
	return fmt.Sprintf("a Redis Cluster of 3 masters (redis-server) at %v", rc.c.Addrs())
}
func (rc *realCluster) faultName() string { return "master paused" }
func (rc *realCluster) faultDetail() string {
	return fmt.Sprintf("master %s is frozen with SIGSTOP: a third of the keys hang, the other two masters stay healthy", rc.sick.Addr)
}
func (rc *realCluster) keys() *keyspace { return &rc.ks }
func (rc *realCluster) fault() error    { return rc.sick.Pause() }
func (rc *realCluster) heal() error     { return rc.sick.Resume() }
func (rc *realCluster) close() error    { return rc.c.Close() }

func (rc *realCluster) clients(workers int, onEvent func(redisguard.Event)) (redis.UniversalClient, *redisguard.Client, error) {
	return demoClients(rc.c.Addrs(), workers, onEvent)
}
