package redisproc

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A slot migrated in batches is split while it moves: the source serves the
// keys it still holds and answers ASK for the moved ones, which the target
// serves after ASKING. After Finish the target owns the slot and every key,
// and the source redirects with MOVED.
func TestSlotMigration(t *testing.T) {
	c, err := testEnv(t).StartCluster(ClusterOptions{Masters: 2})
	if err != nil {
		t.Fatal(err)
	}
	from, to := c.Masters[0], c.Masters[1]
	tag, err := c.KeyOn(from, "mig")
	if err != nil {
		t.Fatal(err)
	}
	slot := Slot(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const keys, batch = 25, 10
	key := func(i int) string { return "{" + tag + "}:" + strconv.Itoa(i) }
	for i := range keys {
		if err := from.Admin().Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.BeginSlotMigration(slot, from, from); err == nil {
		t.Fatal("a migration to the source itself began")
	}

	m, err := c.BeginSlotMigration(slot, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := m.MoveKeys(batch); err != nil || n != batch {
		t.Fatalf("MoveKeys(%d) = %d, %v", batch, n, err)
	}
	left, err := from.Admin().ClusterCountKeysInSlot(ctx, slot).Result()
	if err != nil || left != keys-batch {
		t.Fatalf("source holds %d keys of the slot after one batch (%v), want %d", left, err, keys-batch)
	}
	var moved, kept string // a key on each side
	for i := range keys {
		err := from.Admin().Get(ctx, key(i)).Err()
		switch addr, ask := redis.IsAskError(err); {
		case ask && addr == to.Addr:
			moved = key(i)
		case err == nil:
			kept = key(i)
		default:
			t.Fatalf("GET %s on the source mid-migration: %v, want a value or ASK to %s", key(i), err, to.Addr)
		}
	}
	if moved == "" || kept == "" {
		t.Fatalf("mid-migration: moved key %q, kept key %q; want one of each", moved, kept)
	}
	pipe := to.Admin().Pipeline()
	pipe.Do(ctx, "asking")
	get := pipe.Get(ctx, moved)
	if _, err := pipe.Exec(ctx); err != nil || get.Val() == "" {
		t.Fatalf("ASKING and GET %s on the target: %q, %v", moved, get.Val(), err)
	}
	if addr, ok := redis.IsMovedError(to.Admin().Get(ctx, moved).Err()); !ok || addr != from.Addr {
		t.Fatalf("GET %s on the target without ASKING: want MOVED to the source %s", moved, from.Addr)
	}

	for {
		n, err := m.MoveKeys(batch)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if err := m.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(); err != nil {
		t.Fatal(err)
	}
	if owner, err := c.MasterForSlot(slot); err != nil || owner != to {
		t.Fatalf("slot %d owned by %v (%v) after Finish, want %s", slot, owner, err, to.Addr)
	}
	for i := range keys {
		if v, err := to.Admin().Get(ctx, key(i)).Int(); err != nil || v != i {
			t.Fatalf("GET %s on the target after Finish: %d, %v; want %d", key(i), v, err, i)
		}
	}
	if addr, ok := redis.IsMovedError(from.Admin().Get(ctx, kept).Err()); !ok || addr != to.Addr {
		t.Fatalf("GET %s on the source after Finish: want MOVED to %s", kept, to.Addr)
	}

	// Back in one call, keys and all.
	if err := c.MigrateSlot(slot, to, from, batch); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(); err != nil {
		t.Fatal(err)
	}
	if n, err := from.Admin().ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != keys {
		t.Fatalf("source holds %d keys of the slot after MigrateSlot back (%v), want %d", n, err, keys)
	}
}
