package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
)

// TestStrayMoves: an RC QP moves to the device its packets reach only
// after moveAfter of them in a row (a stray between its own packets
// does not move it), at most every moveEvery (a peer whose packets come
// by two queues does not make it swing); a UD QP never moves.
func TestStrayMoves(t *testing.T) {
	n := simnet.New(simnet.Options{})
	var conns []roce.PacketConn
	for _, a := range []string{"10.0.3.1:4791", "10.0.3.1:4792", "10.0.3.1:4793"} {
		c, err := n.Listen(netip.MustParseAddrPort(a))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	devs, err := NewDevices(conns, DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Cleanup(func() { d.Close() })
	}
	cq := NewCQ(16)
	rc, err := devs[1].CreateQP(NewPD(), QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	ud, err := devs[1].CreateQP(NewPD(), QPInitAttr{Type: UD, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 * moveAfter {
		devs[0].stray(ud)
	}
	if ud.sender() != devs[1] {
		t.Fatal("a UD QP moved")
	}
	for range moveAfter - 1 {
		devs[0].stray(rc)
	}
	rc.served() // one of its own in between
	for range moveAfter - 1 {
		devs[0].stray(rc)
	}
	if rc.sender() != devs[1] {
		t.Fatalf("the RC QP moved after %d strays in a row, fewer than %d", moveAfter-1, moveAfter)
	}
	devs[0].stray(rc)
	if rc.sender() != devs[0] || devs[0].lookupQP(rc.QPN()) != rc {
		t.Fatalf("after %d strays in a row the RC QP is not queue 0's", moveAfter)
	}
	if a, b := devs[0].ServedQPs(), devs[1].ServedQPs(); a != 1 || b != 1 || devs[1].NumQPs() != 2 {
		t.Errorf("queue 0 serves %d QPs and queue 1 %d (of the %d it numbered), want 1 (the RC QP) and 1 (the UD QP) of 2", a, b, devs[1].NumQPs())
	}
	for range 10 * moveAfter {
		devs[2].stray(rc)
	}
	if rc.sender() != devs[0] {
		t.Fatalf("the RC QP moved again within %v", moveEvery)
	}
	rc.movedAt.Store(time.Now().Add(-moveEvery).UnixNano())
	for range moveAfter {
		devs[2].stray(rc)
	}
	if rc.sender() != devs[2] || devs[0].lookupQP(rc.QPN()) != nil || devs[2].lookupQP(rc.QPN()) != rc {
		t.Fatalf("a QP %v after it moved is not queue 2's alone", moveEvery)
	}
	if got := devs[0].stats.QPsMovedIn.Load() + devs[2].stats.QPsMovedIn.Load(); got != 2 {
		t.Errorf("QPsMovedIn %d, want 2", got)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if a, b, c := devs[0].ServedQPs(), devs[1].ServedQPs(), devs[2].ServedQPs(); a != 0 || b != 1 || c != 0 {
		t.Errorf("with the RC QP closed the queues serve %d, %d, %d QPs, want 0, 1 (the UD QP), 0", a, b, c)
	}
}
