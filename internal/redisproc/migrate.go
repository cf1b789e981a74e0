package redisproc

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// migrateTimeout is MIGRATE's own timeout, in milliseconds: below
// adminTimeout, so that the server gives up before the admin client does.
const migrateTimeout = 1000

// SlotMigration moves one hash slot, and the keys in it, from one master to
// another, step by step, as redis-cli --cluster reshard does: Begin marks
// the slot IMPORTING on the target and MIGRATING on the source, MoveKeys
// migrates the source's keys in batches, and Finish assigns the slot to the
// target. Between Begin and Finish the slot is split: the source serves the
// keys it still holds and answers ASK for the others, and the target serves
// those to a client that sends ASKING first.
type SlotMigration struct {
	Slot     int
	From, To *Server

	c            *Cluster
	fromID, toID string
}

// BeginSlotMigration marks slot IMPORTING on to and MIGRATING on from. from
// must own the slot now and to must be another master.
func (c *Cluster) BeginSlotMigration(slot int, from, to *Server) (*SlotMigration, error) {
	if slot < 0 || slot >= SlotCount {
		return nil, fmt.Errorf("redisproc: slot %d out of range", slot)
	}
	if from == to {
		return nil, fmt.Errorf("redisproc: slot %d migrated from %s to itself", slot, from.Addr)
	}
	fromID, err := c.NodeID(from)
	if err != nil {
		return nil, err
	}
	toID, err := c.NodeID(to)
	if err != nil {
		return nil, err
	}
	m := &SlotMigration{Slot: slot, From: from, To: to, c: c, fromID: fromID, toID: toID}
	// The target first: once the source says ASK, the target must accept.
	if err := to.setSlot(slot, "importing", fromID); err != nil {
		return nil, err
	}
	if err := from.setSlot(slot, "migrating", toID); err != nil {
		return nil, err
	}
	return m, nil
}

// MoveKeys migrates up to n of the keys the source still holds in the slot
// to the target, in one MIGRATE, and returns how many it moved: 0 once the
// source holds none. A key that exists on both sides is replaced by the
// source's: while the source holds a key, the key is served there.
func (m *SlotMigration) MoveKeys(n int) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("redisproc: MoveKeys(%d): want a positive batch", n)
	}
	var keys []string
	err := m.From.do("CLUSTER GETKEYSINSLOT", func(ctx context.Context, a *redis.Client) error {
		var err error
		keys, err = a.ClusterGetKeysInSlot(ctx, m.Slot, n).Result()
		return err
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	args := []any{"migrate", "127.0.0.1", strconv.Itoa(m.To.Port), "", 0, migrateTimeout, "replace", "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	// A status NOKEY, no error, if the keys went meanwhile.
	err = m.From.do("MIGRATE to "+m.To.Addr, func(ctx context.Context, a *redis.Client) error {
		return a.Do(ctx, args...).Err()
	})
	if err != nil {
		return 0, err
	}
	return len(keys), nil
}

// Finish assigns the slot to the target on every node that is a master now:
// the target first, then the source, then the others, as redis-cli does, so
// that the source's redirects name the new owner at once. Replicas learn it
// from their masters.
func (m *SlotMigration) Finish() error {
	order := []*Server{m.To, m.From}
	for _, n := range m.c.Nodes() {
		if n != m.To && n != m.From && n.Reachable() && n.isMaster() {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := n.setSlot(m.Slot, "node", m.toID); err != nil {
			return err
		}
	}
	return nil
}

// MigrateSlot moves slot and its keys from from to to: BeginSlotMigration,
// MoveKeys in batches of batch until none is left, and Finish.
func (c *Cluster) MigrateSlot(slot int, from, to *Server, batch int) error {
	m, err := c.BeginSlotMigration(slot, from, to)
	if err != nil {
		return err
	}
	for {
		n, err := m.MoveKeys(batch)
		if err != nil {
			return err
		}
		if n == 0 {
			return m.Finish()
		}
	}
}

func (s *Server) setSlot(slot int, state, id string) error {
	return s.do("CLUSTER SETSLOT "+strconv.Itoa(slot)+" "+state, func(ctx context.Context, a *redis.Client) error {
		return a.Do(ctx, "cluster", "setslot", slot, state, id).Err()
	})
}

// isMaster reports whether s says it is a master (ROLE).
func (s *Server) isMaster() bool {
	var role string
	err := s.do("ROLE", func(ctx context.Context, a *redis.Client) error {
		r, err := a.Do(ctx, "role").Slice()
		if err == nil && len(r) > 0 {
			role, _ = r[0].(string)
		}
		return err
	})
	return err == nil && role == "master"
}
