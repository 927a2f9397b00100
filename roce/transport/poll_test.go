package transport_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestDevicePolled: a polled device (DeviceOptions.Polled) receives only
// as its Poll is called, here by a goroutine that spins on it, and carries
// the RC workload (every opcode, a lossy link) to a device that is not
// polled; after Close, Poll says the device is closed.
func TestDevicePolled(t *testing.T) {
	n := simnet.New(simnet.Options{Loss: 0.01, Duplicate: 0.01, Seed: 7})
	a := newEndOpts(t, n, "10.0.0.1:4791", transport.DeviceOptions{Polled: true})
	b := newEnd(t, n, "10.0.0.2:4791")
	connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})
	stop, stopped := make(chan struct{}), make(chan error, 1)
	polls := 0
	go func() {
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			default:
			}
			k, err := a.dev.Poll()
			if err != nil {
				stopped <- err
				return
			}
			polls += k
		}
	}()
	workload(t, a, b, 60, 3*1024+17, 16, 20*time.Second)
	close(stop)
	if err := <-stopped; err != nil {
		t.Fatalf("poll: %v", err)
	}
	if polls == 0 {
		t.Fatal("the polled device read no packet through Poll: the test proved nothing")
	}
	a.dev.Close()
	if _, err := a.dev.Poll(); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("Poll after Close: %v, want roce.ErrConnClosed", err)
	}
}

// TestDevicePolledNeedsTryReader: a polled device on a conn that cannot
// read without waiting is refused; Poll on a device that is not polled is
// an error.
func TestDevicePolledNeedsTryReader(t *testing.T) {
	n := simnet.New(simnet.Options{})
	c, err := n.Listen(netip.MustParseAddrPort("10.0.0.3:4791"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.NewDevice(waitOnly{c}, transport.DeviceOptions{Polled: true}); err == nil {
		t.Error("a polled device on a conn without TryReadBatch: no error")
	}
	b := newEnd(t, n, "10.0.0.4:4791")
	if _, err := b.dev.Poll(); err == nil {
		t.Error("Poll on a device that is not polled: no error")
	}
}

// waitOnly hides its conn's TryReadBatch.
type waitOnly struct{ roce.PacketConn }
