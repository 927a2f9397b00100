package leg

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/ibv"
)

func TestGRHSource(t *testing.T) {
	v4 := make([]byte, grhLen) // RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header
	v4[20] = 0x45
	copy(v4[32:36], []byte{198, 18, 1, 2})
	v6 := make([]byte, grhLen) // a GRH or IPv6 header
	v6[0] = 0x60
	copy(v6[8:24], netip.MustParseAddr("fd00::7").AsSlice())
	mapped := make([]byte, grhLen) // a GRH whose IPv4-mapped source GID has 0x45 at byte 20, as an IPv4 header would
	mapped[0] = 0x60
	m := netip.MustParseAddr("::ffff:69.18.3.2").As16()
	copy(mapped[8:24], m[:])
	copy(mapped[24:40], netip.MustParseAddr("::ffff:198.18.3.1").AsSlice())
	for _, tc := range []struct {
		name string
		grh  []byte
		want netip.Addr
	}{
		{"RoCEv2 IPv4", v4, netip.MustParseAddr("198.18.1.2")},
		{"IPv6", v6, netip.MustParseAddr("fd00::7")},
		{"IPv4-mapped GID", mapped, netip.MustParseAddr("69.18.3.2")},
	} {
		if got := grhSource(tc.grh); got != tc.want {
			t.Errorf("%s: source %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUDRingPoolEmpty: a receive completes while the pool has no buffer
// to post in its place: the same buffer goes back to the queue (which
// stays full) and the datagram is reported dropped.
func TestUDRingPoolEmpty(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: (UDRecvDepth + 1) * 4096, Classes: []int{4096}})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	type post struct {
		id  uint64
		off int
	}
	var posts []post
	r, err := NewUDRing(pl, 4096, func(id uint64, b *pool.Buf) error { posts = append(posts, post{id, b.Offset()}); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(posts) != UDRecvDepth || posts[0].id != 0 || posts[UDRecvDepth-1].id != UDRecvDepth-1 {
		t.Fatalf("receives posted %v, want IDs 0 to %d", posts, UDRecvDepth-1)
	}
	first := posts[0]
	b, empty, err := r.Take(first.id) // one buffer left in the pool: posted instead
	if err != nil || empty || b == nil || b.Offset() != first.off {
		t.Fatalf("take with a buffer free: %v, %v, %v", b, empty, err)
	}
	if last := posts[len(posts)-1]; last.id != first.id || last.off == first.off {
		t.Errorf("posted in its place %+v, want slot %d with another buffer", last, first.id)
	}
	b2, empty, err := r.Take(posts[1].id) // none left
	if last := posts[len(posts)-1]; err != nil || !empty || b2 != nil || last != posts[1] {
		t.Fatalf("take with the pool empty: buffer %v, dropped %v, %v; last post %+v, want %+v reposted", b2, empty, err, last, posts[1])
	}
	held := 0
	for _, b := range r.posted {
		if b != nil {
			held++
		}
	}
	if held != UDRecvDepth {
		t.Errorf("%d receives posted, want %d", held, UDRecvDepth)
	}
	for _, id := range []uint64{UDRecvDepth, 0xdead000} {
		if _, _, err := r.Take(id); err == nil {
			t.Errorf("a completion %#x for no posted buffer: no error", id)
		}
	}
	b.Release()
	r.Close()
	if !pl.Idle() {
		t.Error("buffers held after the ring closed")
	}
	_, err = NewUDRing(pl, 4096, func(uint64, *pool.Buf) error { return errors.New("QP gone") })
	if err == nil || !pl.Idle() {
		t.Errorf("a ring whose posts fail: %v (buffers all free: %v)", err, pl.Idle())
	}
}

// TestVerbsSrcAddr: the source a verbs leg's own datagrams arrive with,
// which a group compares to drop them (DropOwn), is what grhSource makes
// of their GRH: the leg's ip on RoCE, its port's GID 0 on an InfiniBand
// port found through IPoIB (an IB GRH's source GID holds no IP).
func TestVerbsSrcAddr(t *testing.T) {
	roceIP, ibIP := netip.MustParseAddr("10.20.0.1"), netip.MustParseAddr("10.10.0.1")
	roce := &verbsLeg{cfg: &config.Leg{IP: roceIP}, gid: ibv.GIDChoice{GIDEntry: ibv.GIDEntry{GID: ibv.GID(netip.MustParseAddr("::ffff:10.20.0.1").As16()), Type: ibv.GIDTypeRoCEv2}}}
	portGID := netip.MustParseAddr("fe80::f452:1403:7b:e1b1")
	ib := &verbsLeg{cfg: &config.Leg{IP: ibIP}, gid: ibv.GIDChoice{GIDEntry: ibv.GIDEntry{GID: ibv.GID(portGID.As16()), Type: ibv.GIDTypeIB}, IPoIB: "ib0"}}
	for _, tc := range []struct {
		name string
		v    *verbsLeg
		grh  netip.Addr // the source GID its datagrams' GRH carries
	}{
		{"RoCE", roce, netip.MustParseAddr("::ffff:10.20.0.1")},
		{"InfiniBand", ib, portGID},
	} {
		grh := make([]byte, grhLen)
		grh[0] = 0x60
		copy(grh[8:24], tc.grh.AsSlice())
		if got, want := tc.v.srcAddr(), grhSource(grh); got != want {
			t.Errorf("%s: srcAddr %v, but its datagrams arrive from %v", tc.name, got, want)
		}
	}
}
