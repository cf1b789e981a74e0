//go:build !unix

package redisguard

import "net"

// dataWaiting cannot look into a socket on this platform: a reply that
// comes after its caller gave up goes unnoticed.
func dataWaiting(net.Conn) bool { return false }
