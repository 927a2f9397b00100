package transport_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestReadYields: a READ far larger than ResponseBudget, whose data is
// all there at once, does not hold its device's receive loop for the
// whole stream. The serving device is polled here, so that the test is
// its loop: the first Poll reads the READ and sends a budget of its
// responses, then yields (ReadYields); a SEND on another QP of the same
// two devices, arriving meanwhile, is handled at the next Poll, before
// the rest of the stream (its receive completion there while the server
// has sent a budget or two, not the whole READ). Written in one go, as
// before, the first Poll sent every response before it read the SEND.
// The READ's bytes arrive whole, and a 2-byte READ does not yield.
func TestReadYields(t *testing.T) {
	t.Run("budget", func(t *testing.T) { readYields(t, 0) })
	t.Run("no budget", func(t *testing.T) { readYields(t, -1) })
	sn := simnet.New(simnet.Options{})
	c, err := sn.Listen(netip.MustParseAddrPort("10.0.0.3:4791"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := transport.NewDevice(c, transport.DeviceOptions{ResponseBudget: -2}); err == nil || !strings.Contains(err.Error(), "budget of -2") {
		t.Errorf("a READ response budget of -2: %v, want it refused", err)
	}
}

// readYields is TestReadYields with DeviceOptions.ResponseBudget budget
// on the server: -1 is the stream in one go, the SEND after it.
func readYields(t *testing.T, budget int) {
	const size = 4 << 20 // 4096 responses at MTU 1024: 16 budgets
	const responses = size / 1024
	sn := simnet.New(simnet.Options{})
	client := newEnd(t, sn, "10.0.0.1:4791")
	server := newEndOpts(t, sn, "10.0.0.2:4791", transport.DeviceOptions{Polled: true, ResponseBudget: budget})
	client.mem, server.mem = make([]byte, size+4096), make([]byte, size+4096)
	for _, e := range []*end{client, server} {
		var err error
		if e.mr, err = e.pd.RegisterMR(e.mem, e.access); err != nil {
			t.Fatal(err)
		}
	}
	// poll is the server's loop for a moment: a Poll that finds the conn
	// empty runs what yielded.
	poll := func() {
		t.Helper()
		time.Sleep(5 * time.Millisecond) // what was sent has arrived
		if _, err := server.dev.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	connect(t, client, server, connOpts{mtu: 1024, timeout: 16, retry: 7})
	other := &end{dev: client.dev, pd: client.pd, mr: client.mr, mem: client.mem, scq: client.scq, rcq: client.rcq, addr: client.addr, access: client.access}
	otherServer := &end{dev: server.dev, pd: server.pd, mr: server.mr, mem: server.mem, scq: server.scq, rcq: server.rcq, addr: server.addr, access: server.access}
	connect(t, other, otherServer, connOpts{mtu: 1024, timeout: 16, retry: 7})

	want := pattern(5, size)
	copy(server.mem, want)
	if err := otherServer.qp.PostRecv(transport.RecvWR{ID: 9, Local: sge(server, size, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := client.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpRead, Signaled: true,
		Local: sge(client, 0, size), Remote: addr(server, 0), RKey: server.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	poll() // reads the READ, sends a budget
	sent := server.dev.Stats().TxPackets.Load()
	if budget < 0 {
		if sent < responses || server.dev.Stats().ReadYields.Load() != 0 {
			t.Fatalf("without a budget the first Poll sent %d of the READ's %d responses, %d yields: want them all, no yield",
				sent, responses, server.dev.Stats().ReadYields.Load())
		}
	} else if sent >= responses || server.dev.Stats().ReadYields.Load() != 1 {
		t.Fatalf("the first Poll sent %d of the READ's %d responses, %d yields: want a budget (%d), then a yield",
			sent, responses, server.dev.Stats().ReadYields.Load(), transport.ResponseBudget)
	}
	if err := other.qp.PostSend(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true, Local: sge(client, size, 64)}); err != nil {
		t.Fatal(err)
	}
	poll() // reads the SEND, then the READ's next budget
	var wc [1]transport.WC
	if n := server.rcq.Poll(wc[:]); n != 1 || wc[0].ID != 9 || wc[0].Status != transport.StatusSuccess {
		t.Fatalf("the SEND that arrived after the READ's first budget: %d receive completions %+v at the next Poll", n, wc[:n])
	}
	if got := server.dev.Stats().TxPackets.Load(); got >= responses && budget >= 0 {
		t.Errorf("by the Poll that handled the SEND the server had sent %d packets: the READ's %d responses went first", got, responses)
	}
	var wcs []transport.WC
	for deadline := time.Now().Add(20 * time.Second); len(wcs) < 2; poll() {
		if time.Now().After(deadline) {
			t.Fatalf("the READ and SEND not both complete in 20 s: %+v (%d yields)", wcs, server.dev.Stats().ReadYields.Load())
		}
		var got [2]transport.WC
		wcs = append(wcs, got[:client.scq.Poll(got[:])]...)
	}
	first, second := uint64(2), uint64(1) // the SEND's, then the READ's
	if budget < 0 {
		first, second = second, first
	}
	if len(wcs) != 2 || wcs[0].ID != first || wcs[1].ID != second {
		t.Errorf("completions %d, %d: want the SEND's first, then the READ's (without a budget the READ's first)", wcs[0].ID, wcs[1].ID)
	}
	for _, w := range wcs {
		if w.Status != transport.StatusSuccess {
			t.Fatalf("completion %+v: %v", w, w.Status)
		}
	}
	equal(t, "the READ's bytes", client.mem[:size], want)
	if y := server.dev.Stats().ReadYields.Load(); budget >= 0 && int(y) < responses/transport.ResponseBudget-2 || budget < 0 && y != 0 {
		t.Errorf("%d yields for %d responses, want one per %d (none without a budget)", y, responses, transport.ResponseBudget)
	}
	// A READ within the budget is sent at once.
	y := server.dev.Stats().ReadYields.Load()
	if err := client.qp.PostSend(transport.SendWR{ID: 3, Opcode: transport.OpRead, Signaled: true,
		Local: sge(client, 0, 2), Remote: addr(server, 0), RKey: server.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	poll()
	checkWC(t, wait(t, client.scq, 1, 5*time.Second)[0], 3, transport.OpRead)
	if got := server.dev.Stats().ReadYields.Load(); got != y {
		t.Errorf("a 2-byte READ yielded %d times", got-y)
	}
}
