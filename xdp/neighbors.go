package xdp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
)

// Neighbors gives the Ethernet address that frames to a peer's IP address
// go to: the peer's own on the same link, the gateway's for a routed peer.
// An AF_XDP Conn builds its frames itself, so it needs one.
type Neighbors interface {
	HardwareAddr(ip netip.Addr) (net.HardwareAddr, error)
}

// ErrNoNeighbor is returned when a Neighbors does not know an address.
var ErrNoNeighbor = errors.New("xdp: no neighbor entry")

// StaticNeighbors is a fixed table of neighbors.
type StaticNeighbors map[netip.Addr]net.HardwareAddr

// HardwareAddr implements Neighbors.
func (s StaticNeighbors) HardwareAddr(ip netip.Addr) (net.HardwareAddr, error) {
	if mac, ok := s[ip.Unmap()]; ok {
		return mac, nil
	}
	return nil, fmt.Errorf("%w for %v", ErrNoNeighbor, ip)
}

// ProcARP reads the kernel's IPv4 neighbour table (/proc/net/arp) of the
// network namespace it was opened in: the kernel keeps resolving neighbours
// on the interface as usual (ARP is not RoCEv2: the classifier passes it).
// It knows no IPv6 neighbours; use StaticNeighbors for those. Only complete
// entries (flag ATF_COM) count. It is safe for concurrent use.
type ProcARP struct {
	mu sync.Mutex
	f  *os.File
}

// OpenProcARP opens the neighbour table of the calling thread's network
// namespace; the ProcARP keeps reading that namespace's from any thread.
func OpenProcARP() (*ProcARP, error) {
	f, err := os.Open("/proc/thread-self/net/arp")
	if err != nil {
		return nil, fmt.Errorf("xdp: open neighbour table: %w", err)
	}
	return &ProcARP{f: f}, nil
}

// Close closes the table.
func (p *ProcARP) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f.Close()
}

// HardwareAddr implements Neighbors.
func (p *ProcARP) HardwareAddr(ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("%w for %v: /proc/net/arp holds IPv4 only", ErrNoNeighbor, ip)
	}
	p.mu.Lock()
	b, err := io.ReadAll(io.NewSectionReader(p.f, 0, 1<<30))
	p.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("xdp: read neighbour table: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan() // header: IP address, HW type, Flags, HW address, Mask, Device
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 4 || string(f[0]) != ip.String() {
			continue
		}
		if flags, err := strconv.ParseUint(string(f[2]), 0, 32); err != nil || flags&0x2 == 0 {
			continue
		}
		mac, err := net.ParseMAC(string(f[3]))
		if err != nil {
			return nil, fmt.Errorf("xdp: neighbour table entry for %v: %w", ip, err)
		}
		return mac, nil
	}
	return nil, fmt.Errorf("%w for %v in /proc/net/arp", ErrNoNeighbor, ip)
}
