package redisguard

import (
	"context"
	"fmt"
	"time"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The resharding step of the chaos schedule (chaos_faults_test.go): a slot
// that takes new keys all the time, one of the once-only writers' (see
// chaos_once_test.go), migrates under load from its master to another
// shard's, as redis-cli --cluster reshard does it: IMPORTING on the target,
// MIGRATING on the source, MIGRATE in batches, then SETSLOT NODE on every
// master. While the slot is split the source answers ASK for the keys it
// no longer holds, new ones included, and a two-key script in the slot is
// refused with TRYAGAIN; the client must follow the first and ride out the
// second, and send neither's command twice.

// reshardBatches is about how many MIGRATE batches a slot moves in, and
// reshardPace the pause after each: together they keep the slot split for
// about a second, whatever number of keys it holds by then.
const (
	reshardBatches = 40
	reshardPace    = 25 * time.Millisecond
	reshardMinKeys = 8 // the smallest batch
)

// quietKinds are the faults that break no connection and stop no server:
// a network error during one is the client's, not the fault's.
var quietKinds = []string{"reshard"}

// reshard migrates one of the once-only writers' slots to another shard
// and says what it did.
func (s *chaosSchedule) reshard() string {
	t := s.t
	slot := s.w.onceSlots[s.rng.IntN(len(s.w.onceSlots))]
	fromShard := s.w.slotShard(slot)
	toShard := (fromShard + 1 + s.rng.IntN(len(s.cl.Masters)-1)) % len(s.cl.Masters)
	from, to := s.nodeWithRole(fromShard, "master"), s.nodeWithRole(toShard, "master")
	if from == nil || to == nil {
		return fmt.Sprintf("skipped: shard %d or %d has no master", fromShard, toShard)
	}
	if owner := s.cl.MasterForSlot(t, slot); owner != from {
		t.Fatalf("reshard: slot %d is %v's, the soak's map says shard %d's (%v)", slot, owner, fromShard, from)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	keys, err := from.Admin().ClusterCountKeysInSlot(ctx, slot).Result()
	cancel()
	if err != nil {
		t.Fatalf("reshard: CLUSTER COUNTKEYSINSLOT %d on %v: %v", slot, from, err)
	}
	batch := max(reshardMinKeys, int(keys)/reshardBatches)
	asking := commandCalls(t, []*redistest.Server{to}, "asking")

	start := time.Now()
	for _, shard := range []int{fromShard, toShard} {
		win := s.w.faults.open(shard, "reshard")
		defer s.healing(win, time.Time{})
	}
	m := s.cl.BeginSlotMigration(t, slot, from, to)
	moved, batches := 0, 0
	for {
		n := m.MoveKeys(t, batch)
		if n == 0 {
			break
		}
		moved += n
		batches++
		time.Sleep(reshardPace)
	}
	m.Finish(t)
	s.w.moveSlot(slot, toShard)
	split := time.Since(start)

	asked := commandCalls(t, []*redistest.Server{to}, "asking") - asking
	s.reshards++
	s.asked += asked
	return fmt.Sprintf("slot %d shard %d master %s -> shard %d master %s: %d keys in %d MIGRATEs, split %.1fs; ASKING %d times on the importing master",
		slot, fromShard, from.Addr, toShard, to.Addr, moved, batches, split.Seconds(), asked)
}
