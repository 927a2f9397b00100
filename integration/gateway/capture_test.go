package gateway_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// roceTally counts the RoCEv2 packets (UDP 4791) seen on one of the
// guest's interfaces, by opcode, and keeps the invalidated rkeys of the
// SEND_WITH_INV packets and the rkeys of READ requests in order: a guest
// test that fails in the protocol shows with it what crossed each fabric.
type roceTally struct {
	mu      sync.Mutex
	ops     map[string]int
	invKeys []uint32
	naks    []string
	stop    chan struct{}
	done    chan struct{}
}

// tallyRoCE starts a tally on ifname until the test ends.
func tallyRoCE(t *testing.T, ifname string) *roceTally {
	t.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatalf("tally on %s: %v", ifname, err)
	}
	proto := uint16(unix.ETH_P_ALL)
	proto = proto<<8 | proto>>8 // network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(proto))
	if err != nil {
		t.Fatalf("tally on %s: %v", ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		t.Fatalf("tally on %s: %v", ifname, err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	r := &roceTally{ops: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		b := make([]byte, 65536)
		var p roce.Packet
		for {
			select {
			case <-r.stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, b, 0)
			if err != nil || n < 14+20+8 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != 17 {
				continue
			}
			ihl := int(b[14]&0xf) * 4
			udp := b[14+ihl : n]
			if binary.BigEndian.Uint16(udp[2:]) != roce.Port || p.Decode(udp[8:]) != nil {
				continue
			}
			r.mu.Lock()
			op := p.Opcode()
			r.ops[op.String()]++
			if p.IETH != nil && len(r.invKeys) < 4096 {
				r.invKeys = append(r.invKeys, p.IETH.RKey())
			}
			if p.AETH != nil && op == roce.RCAcknowledge && len(r.naks) < 64 {
				if syn := p.AETH.Syndrome(); syn.Type() != roce.AckTypeACK {
					r.naks = append(r.naks, fmt.Sprintf("%v psn %d", syn, p.BTH.PSN()))
				}
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(r.stop)
		<-r.done
		unix.Close(fd)
	})
	return r
}

// String says what was counted.
func (r *roceTally) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for k := range r.ops {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "  %s %d\n", k, r.ops[k])
	}
	fmt.Fprintf(&b, "  invalidated rkeys (%d): %x\n", len(r.invKeys), r.invKeys[:min(len(r.invKeys), 40)])
	fmt.Fprintf(&b, "  NAKs: %v\n", r.naks)
	return b.String()
}
