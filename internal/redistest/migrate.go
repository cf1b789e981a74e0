package redistest

import (
	"testing"

	"github.com/redisguard/redisguard/internal/redisproc"
)

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

	m *redisproc.SlotMigration
}

// BeginSlotMigration marks slot IMPORTING on to and MIGRATING on from. from
// must own the slot now and to must be another master.
func (c *Cluster) BeginSlotMigration(t testing.TB, slot int, from, to *Server) *SlotMigration {
	t.Helper()
	m, err := c.c.BeginSlotMigration(slot, from.p, to.p)
	if err != nil {
		t.Fatal(err)
	}
	return &SlotMigration{Slot: slot, From: from, To: to, m: m}
}

// MoveKeys migrates up to n of the keys the source still holds in the slot
// to the target, in one MIGRATE, and returns how many it moved: 0 once the
// source holds none.
func (m *SlotMigration) MoveKeys(t testing.TB, n int) int {
	t.Helper()
	moved, err := m.m.MoveKeys(n)
	if err != nil {
		t.Fatal(err)
	}
	return moved
}

// Finish assigns the slot to the target on every node that is a master now,
// the target first. Replicas learn it from their masters; WaitHealthy
// waits for every node to agree.
func (m *SlotMigration) Finish(t testing.TB) {
	t.Helper()
	if err := m.m.Finish(); err != nil {
		t.Fatal(err)
	}
}

// MigrateSlot moves slot and its keys from from to to: BeginSlotMigration,
// MoveKeys in batches of batch until none is left, and Finish.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, from, to *Server, batch int) {
	t.Helper()
	if err := c.c.MigrateSlot(slot, from.p, to.p, batch); err != nil {
		t.Fatal(err)
	}
}
