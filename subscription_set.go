package redisguard

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// subscribeMark is in every subscribe and unsubscribe command: all six
// names end in "subscribe".
var subscribeMark = []byte("subscribe\r\n")

// subscriptionSet is what a connection is subscribed to, by kind: "channel",
// "pattern" or "shard channel".
type subscriptionSet map[string]map[string]struct{}

// apply updates the set from the commands in p, as go-redis writes them
// (RESP arrays of bulk strings, whole commands per write), and reports
// whether it changed. What it cannot parse it leaves alone.
func (s *subscriptionSet) apply(p []byte) (changed bool) {
	for len(p) > 0 {
		args, rest, ok := parseCommand(p)
		if !ok {
			return changed
		}
		p = rest
		if len(args) == 0 {
			continue
		}
		kind, add := subscribeKind(strings.ToLower(args[0]))
		if kind == "" {
			continue
		}
		if *s == nil {
			*s = make(subscriptionSet)
		}
		m := (*s)[kind]
		if m == nil {
			m = make(map[string]struct{})
			(*s)[kind] = m
		}
		if !add && len(args) == 1 {
			clear(m) // UNSUBSCRIBE with no names drops them all
			changed = true
		}
		for _, name := range args[1:] {
			if add {
				m[name] = struct{}{}
			} else {
				delete(m, name)
			}
			changed = true
		}
	}
	return changed
}

const shardKind = "shard channel"

// subscribeKind maps a command name to the kind it (un)subscribes.
func subscribeKind(cmd string) (kind string, add bool) {
	switch cmd {
	case "subscribe":
		return "channel", true
	case "unsubscribe":
		return "channel", false
	case "psubscribe":
		return "pattern", true
	case "punsubscribe":
		return "pattern", false
	case "ssubscribe":
		return shardKind, true
	case "sunsubscribe":
		return shardKind, false
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

// parseCommand reads one RESP array of bulk strings from p.
func parseCommand(p []byte) (args []string, rest []byte, ok bool) {
	n, p, ok := parseHeader(p, '*')
	if !ok {
		return nil, nil, false
	}
	args = make([]string, 0, n)
	for range n {
		var l int
		if l, p, ok = parseHeader(p, '$'); !ok || len(p) < l+2 {
			return nil, nil, false
		}
		args = append(args, string(p[:l]))
		p = p[l+2:]
	}
	return args, p, true
}

// parseHeader reads "<prefix><n>\r\n" from p.
func parseHeader(p []byte, prefix byte) (int, []byte, bool) {
	if len(p) == 0 || p[0] != prefix {
		return 0, nil, false
	}
	end := bytes.Index(p, []byte("\r\n"))
	if end < 0 {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(p[1:end]))
	if err != nil || n < 0 || n > len(p) {
		return 0, nil, false
	}
	return n, p[end+2:], true
}
