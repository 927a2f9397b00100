package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

// TestMessageCopyTo: a whole and a gathered message copy out as the same
// packet; lengths outside the buffer, or a destination too short, are an
// error with nothing copied.
func TestMessageCopyTo(t *testing.T) {
	payload := bytes.Repeat([]byte{0xa5}, 301)
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: 3},
		RETH: roce.RETHFields{DMALen: uint32(len(payload))}}
	whole := roce.AppendPacket(nil, &f, payload)
	g, hdr := roce.AppendPacketGather(nil, &f, len(payload))
	for _, m := range []roce.Message{
		{Buf: whole, N: len(whole)},
		{Buf: g, N: len(g), Hdr: hdr, Payload: payload},
	} {
		dst := filled(len(whole) + 1)
		n, err := m.CopyTo(dst)
		if err != nil || n != len(whole) || !bytes.Equal(dst[:n], whole) || dst[n] != 0xff {
			t.Errorf("CopyTo (gathered %v) = %d, %v: % x", m.Payload != nil, n, err, dst)
		}
		if n, err := m.CopyTo(filled(len(whole) - 1)); !errors.Is(err, roce.ErrTruncated) || n != 0 {
			t.Errorf("CopyTo one byte short (gathered %v) = %d, %v; want ErrTruncated", m.Payload != nil, n, err)
		}
	}
	for _, m := range []roce.Message{
		{N: 1},
		{Buf: whole, N: -1},
		{Buf: whole, N: len(whole) + 1},
		{Buf: g, N: len(g), Hdr: len(g) + 10, Payload: payload},
		{Buf: g, N: len(g), Hdr: -1, Payload: payload},
	} {
		dst := filled(2 * len(whole))
		if n, err := m.CopyTo(dst); err == nil || n != 0 || !bytes.Equal(dst, filled(len(dst))) {
			t.Errorf("CopyTo of N %d, Hdr %d over %d bytes = %d, %v", m.N, m.Hdr, len(m.Buf), n, err)
		}
	}
}
