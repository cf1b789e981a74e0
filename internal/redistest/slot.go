package redistest

import "github.com/redisguard/redisguard/internal/redisproc"

// SlotCount is the number of hash slots in Redis Cluster.
const SlotCount = redisproc.SlotCount

// Slot returns the cluster hash slot of key, as CLUSTER KEYSLOT does. If the
// key contains a '{' followed later by a '}' with at least one byte between
// them, only the bytes between the first '{' and the first '}' after it are
// hashed, so that keys sharing a {tag} share a slot.
func Slot(key string) int { return redisproc.Slot(key) }
