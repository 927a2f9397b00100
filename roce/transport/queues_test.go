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
// packet, sent to queue 0's conn: a peer the kernel did not steer, or
// GRO joining two QPs' packets) is handed to its QP all the same, each
// counted, every byte of the workload delivered.
func TestDevicesQueues(t *testing.T) {
	n := simnet.New(simnet.Options{})
	var conns []roce.PacketConn
	for _, a := range []string{"10.0.0.1:4791", "10.0.0.1:4792"} {
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
			before := devs[0].Stats().RxForeign.Load()
			workload(t, a, b, 70, 3*1024+17, 16, 10*time.Second)
			foreign := devs[0].Stats().RxForeign.Load() - before
			if q == 1 && foreign == 0 {
				t.Error("queue 1's QP was served by queue 0's device with no packet counted foreign: the test proved nothing")
			}
			if q == 0 && foreign != 0 {
				t.Errorf("queue 0's own QP: %d packets counted foreign", foreign)
			}
		})
	}
	if s := devs[1].Stats().Snapshot(); s.RxPackets != 0 || s.TxPackets == 0 {
		t.Errorf("queue 1's device read %d packets (none reached its conn) and sent %d (its QPs' own)", s.RxPackets, s.TxPackets)
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
