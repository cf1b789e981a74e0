package redisguard_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/redisguard/redisguard"
)

// A cluster whose reads go on from a replica while a master is down, as
// long as the replica heard from its master within the last two seconds.
// A read that finds no such replica fails fast, like a write.
func ExampleReadFrom() {
	cfg := redisguard.Config{
		Addrs:               []string{"10.0.0.1:7000", "10.0.0.2:7000"},
		ReadFrom:            redisguard.ReadFromMasterPreferred,
		MaxReplicaStaleness: 2 * time.Second,
	}
	fmt.Println(cfg.ReadFrom)

	// The same from a URL.
	cfg, err := redisguard.ParseURL("redis+cluster://10.0.0.1:7000,10.0.0.2:7000?read_from=master_preferred&max_replica_staleness=2s")
	fmt.Println(cfg.ReadFrom, cfg.MaxReplicaStaleness, err)

	// A standalone server has no replica to read from.
	_, err = redisguard.NewClient(redisguard.Config{Mode: redisguard.ModeStandalone, Addrs: []string{"localhost:6379"},
		ReadFrom: redisguard.ReadFromReplicaPreferred})
	fmt.Println(errors.Is(err, redisguard.ErrInvalidConfig))
	// Output:
	// master_preferred
	// master_preferred 2s <nil>
	// true
}
