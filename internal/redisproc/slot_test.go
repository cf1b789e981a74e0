package redisproc

import "testing"

func TestCRC16CheckValue(t *testing.T) {
	// The standard check value of CRC16/XMODEM, quoted in the Redis Cluster
	// specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#04x, want 0x31c3", got)
	}
}

func TestSlotHashTags(t *testing.T) {
	for _, tc := range []struct {
		key, hashed string // hashed: the part of key that must be hashed
	}{
		{"plain", "plain"},
		{"", ""},
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{bar}{zap}", "bar"},     // only the first tag counts
		{"foo{{bar}}zap", "{bar"},    // tag runs from the first '{' to the next '}'
		{"foo{}{bar}", "foo{}{bar}"}, // empty first tag: whole key
		{"a{b", "a{b"},               // no closing brace: whole key
		{"a}b{c}", "c"},              // a '}' before the '{' does not matter
		{"{}", "{}"},                 // empty tag: whole key
		{"x{\xff\x00}y", "\xff\x00"}, // binary-safe
		{"123456789", "123456789"},   // slot 0x31C3 % 16384
	} {
		t.Run(tc.key, func(t *testing.T) {
			want := int(crc16(tc.hashed)) % SlotCount
			if got := Slot(tc.key); got != want {
				t.Fatalf("Slot(%q) = %d, want %d (hash of %q)", tc.key, got, want, tc.hashed)
			}
		})
	}
	if got := Slot("123456789"); got != 0x31C3%SlotCount {
		t.Fatalf("Slot(123456789) = %d, want %d", got, 0x31C3%SlotCount)
	}
}
