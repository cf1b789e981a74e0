package redisguard

import (
	"bytes"
	"slices"
	"strings"
)

// subscriptionSet is what a connection is subscribed to, by kind: "channel",
// "pattern" or "shard channel".
type subscriptionSet map[string]map[string]struct{}

// apply updates the set from one (un)subscribe command of kind: names are
// added, or removed; an unsubscribe with no names removes every one of
// kind. It reports whether the set changed.
func (s *subscriptionSet) apply(kind string, add bool, names []string) (changed bool) {
	if *s == nil {
		*s = make(subscriptionSet)
	}
	m := (*s)[kind]
	if m == nil {
		m = make(map[string]struct{})
		(*s)[kind] = m
	}
	if !add && len(names) == 0 {
		clear(m)
		return true
	}
	for _, name := range names {
		if add {
			m[name] = struct{}{}
		} else {
			delete(m, name)
		}
	}
	return len(names) > 0
}

const shardKind = "shard channel"

// subscribeKinds are the commands that (un)subscribe, and what.
var subscribeKinds = [...]struct {
	cmd, kind string
	add       bool
}{
	{"subscribe", "channel", true},
	{"unsubscribe", "channel", false},
	{"psubscribe", "pattern", true},
	{"punsubscribe", "pattern", false},
	{"ssubscribe", shardKind, true},
	{"sunsubscribe", shardKind, false},
}

// subscribeKind maps a command name, in any case, to the kind it
// (un)subscribes; "" for any other command.
func subscribeKind(cmd []byte) (kind string, add bool) {
	for _, k := range subscribeKinds {
		if bytes.EqualFold(cmd, []byte(k.cmd)) {
			return k.kind, k.add
		}
	}
	return "", false
}

// names lists the set as "channel a, channel b, pattern p*", sorted.
func (s subscriptionSet) names() string {
	var out []string
	for kind, m := range s {
		for name := range m {
			out = append(out, kind+" "+name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// key identifies the set; "" for an empty one.
func (s subscriptionSet) key() string {
	var out []string
	for kind, m := range s {
		for name := range m {
			out = append(out, kind+"\x00"+name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\x01")
}

// asStrings copies args.
func asStrings(args [][]byte) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = string(a)
	}
	return out
}
