package roce

import (
	"fmt"
	"strconv"
)

// MTU is an InfiniBand path or port MTU code (IBA 14.2.5.4; the same values
// as enum ibv_mtu and the CM REQ's Path Packet Payload MTU): the payload of
// one packet, 256 to 4096 bytes. The zero value means "unknown".
type MTU uint8

// MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five MTU codes.
func (m MTU) Valid() bool { return m.Bytes() != 0 }

func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprint(m.Bytes())
}

// MarshalJSON writes the MTU in bytes (1024), or 0 when unknown.
func (m MTU) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(m.Bytes()), 10), nil }

// MTUFromBytes is the largest MTU whose payload fits in n bytes, or 0 when
// n < 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}
