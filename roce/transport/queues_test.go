package transport_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestDevicesQueues: devices on two queues number their QPs for their own
// queue, and a packet that reaches the wrong queue's device (here every
// packet, sent to queue 0's conn: a peer the kernel did not steer, or a
// NIC's RSS that hashes what the QPN does not decide) is handed to its QP
// all the same, each counted, every byte of the workload delivered; once
// a QP's packets keep arriving there, queue 0's device takes it over and
// its loop alone serves it: no more are counted foreign, and queue 1's
// device sends none of its packets.
func TestDevicesQueues(t *testing.T) {
	n := simnet.New(simnet.Options{})
	devs := simDevices(t, n, "10.0.0.1:4791", "10.0.0.1:4792")
	var err error
	for i, d := range devs {
		if q, of := d.Queue(); q != i || of != 2 {
			t.Fatalf("device %d: Queue() = %d, %d", i, q, of)
		}
	}
	steered := netip.MustParseAddrPort("10.0.0.1:4791") // where every peer sends
	for i := range 4 {
		t.Run(fmt.Sprint("pair ", i), func(t *testing.T) {
			q := i % 2
			a := newEnd(t, n, fmt.Sprintf("10.0.0.%d:4791", 10+i)) // the peer
			b := &end{dev: devs[q], pd: transport.NewPD(), mem: make([]byte, memSize), addr: steered,
				scq: transport.NewCQ(8192), rcq: transport.NewCQ(8192), access: a.access}
			if b.mr, err = b.pd.RegisterMR(b.mem, b.access); err != nil {
				t.Fatal(err)
			}
			connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})
			if got := roce.QueueOf(b.qp.QPN(), 2); got != q {
				t.Fatalf("queue %d's device gave QPN %#x, which is queue %d's", q, b.qp.QPN(), got)
			}
			before := devs[0].Stats().Snapshot()
			workload(t, a, b, 70, 3*1024+17, 16, 10*time.Second)
			tx1 := devs[1].Stats().TxPackets.Load()
			workload(t, a, b, 70, 3*1024+17, 16, 10*time.Second)
			after := devs[0].Stats().Snapshot()
			foreign, moved := after.RxForeign-before.RxForeign, after.QPsMovedIn-before.QPsMovedIn
			if q == 0 && (foreign != 0 || moved != 0) {
				t.Errorf("queue 0's own QP: %d packets counted foreign, %d QPs moved in", foreign, moved)
			}
			if q == 1 {
				if moved != 1 {
					t.Errorf("queue 1's QP, all of whose packets reach queue 0: %d QPs moved to queue 0, want 1", moved)
				}
				if foreign == 0 || foreign > 16 {
					t.Errorf("queue 1's QP: %d packets counted foreign, want a few (those before it moved)", foreign)
				}
				if sent := devs[1].Stats().TxPackets.Load() - tx1; sent != 0 {
					t.Errorf("queue 1's device sent %d packets in the second workload: its QP moved to queue 0", sent)
				}
			}
		})
	}
	if s := devs[1].Stats().Snapshot(); s.RxPackets != 0 {
		t.Errorf("queue 1's device read %d packets: none reached its conn", s.RxPackets)
	}
	if s := devs[0].Stats().Snapshot(); s.RxUnknownQP != 0 {
		t.Errorf("%d packets for unknown QPs", s.RxUnknownQP)
	}
}

func TestNewDeviceRefusesAQueue(t *testing.T) {
	n := simnet.New(simnet.Options{})
	c, err := n.Listen(netip.MustParseAddrPort("10.0.0.1:4791"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := transport.NewDevice(c, transport.DeviceOptions{Queue: 1, Queues: 2}); err == nil {
		t.Error("NewDevice with a queue of its own: no error (NewDevices sets them)")
	}
	if _, err := transport.NewDevices(nil, transport.DeviceOptions{}); err == nil {
		t.Error("NewDevices with no conn: no error")
	}
}

// simDevices starts the devices of one address's queues on simnet conns
// at addrs (simnet has no SO_REUSEPORT: each queue has a port of its
// own), closed when the test ends.
func simDevices(t *testing.T, n *simnet.Net, addrs ...string) []*transport.Device {
	t.Helper()
	var conns []roce.PacketConn
	for _, a := range addrs {
		c, err := n.Listen(netip.MustParseAddrPort(a))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Cleanup(func() { d.Close() })
	}
	return devs
}

// movedPair connects a peer to a QP of queue 1's device of two, the
// peer sending to queue 0's conn, and runs a workload: the QP moves to
// queue 0's device.
func movedPair(t *testing.T, net string) (devs []*transport.Device, a, b *end) {
	t.Helper()
	n := simnet.New(simnet.Options{})
	devs = simDevices(t, n, net+".1:4791", net+".1:4792")
	var err error
	a = newEnd(t, n, net+".10:4791")
	b = &end{dev: devs[1], pd: transport.NewPD(), mem: make([]byte, memSize), addr: devs[0].LocalAddr(),
		scq: transport.NewCQ(8192), rcq: transport.NewCQ(8192), access: a.access}
	if b.mr, err = b.pd.RegisterMR(b.mem, b.access); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})
	workload(t, a, b, 40, 2048, 16, 10*time.Second)
	if got := devs[0].Stats().QPsMovedIn.Load(); got != 1 {
		t.Fatalf("%d QPs moved to queue 0's device, want 1", got)
	}
	return devs, a, b
}

// TestMovedQPClosed: a QP closed after it moved to another queue's
// device is gone from that device too (a packet for its number is
// unknown there, not handed to it); and when the device that took a QP
// over closes, the QP's own device sends its packets again.
func TestMovedQPClosed(t *testing.T) {
	t.Run("QP closed", func(t *testing.T) {
		devs, a, b := movedPair(t, "10.0.1")
		if err := b.qp.Close(); err != nil {
			t.Fatal(err)
		}
		before := devs[0].Stats().RxUnknownQP.Load()
		if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(a, 0, 64), Signaled: true}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for devs[0].Stats().RxUnknownQP.Load() == before {
			if time.Now().After(deadline) {
				t.Fatal("the SEND to the closed QP's number was not counted unknown in 5 s")
			}
			time.Sleep(time.Millisecond)
		}
		if got := b.rcq.Poll(make([]transport.WC, 4)); got != 0 {
			t.Errorf("the closed QP completed %d receives", got)
		}
	})
	t.Run("its server closed", func(t *testing.T) {
		devs, a, b := movedPair(t, "10.0.2")
		if err := devs[0].Close(); err != nil {
			t.Fatal(err)
		}
		tx := devs[1].Stats().TxPackets.Load()
		if err := a.qp.PostRecv(transport.RecvWR{ID: 7, Local: sge(a, 0, 128)}); err != nil {
			t.Fatal(err)
		}
		copy(b.mem[4096:], "sent by its own device again")
		if err := b.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(b, 4096, 28), Signaled: true}); err != nil {
			t.Fatal(err)
		}
		wc := wait(t, a.rcq, 1, 5*time.Second)[0]
		if wc.Status != transport.StatusSuccess || wc.ID != 7 || string(a.mem[:wc.ByteLen]) != "sent by its own device again" {
			t.Errorf("the peer received %+v, %q", wc, a.mem[:wc.ByteLen])
		}
		if devs[1].Stats().TxPackets.Load() == tx {
			t.Error("queue 1's device sent nothing: its QP's SEND did not leave by it")
		}
	})
}
