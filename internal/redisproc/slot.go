package redisproc

import "strings"

// SlotCount is the number of hash slots in Redis Cluster.
const SlotCount = 16384

// crcTable holds CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0)
// for every byte value: the checksum Redis Cluster hashes keys with.
var crcTable = func() (table [256]uint16) {
	for b := range table {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		table[b] = crc
	}
	return table
}()

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// Slot returns the cluster hash slot of key, as CLUSTER KEYSLOT does. If the
// key contains a '{' followed later by a '}' with at least one byte between
// them, only the bytes between the first '{' and the first '}' after it are
// hashed, so that keys sharing a {tag} share a slot.
func Slot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % SlotCount
}
