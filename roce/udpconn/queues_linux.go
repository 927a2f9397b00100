//go:build linux

package udpconn

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// Queues is n conns bound to one address as a SO_REUSEPORT group, between
// which the kernel steers each datagram by its BTH's destination QP
// (roce.QueueOf: the special QPs, multicast and datagrams too short for a
// BTH to conn 0, any other QP to QPN % n) with a reuseport program
// (steer.c) attached to the group. A receive loop per conn, that gives
// out only QP numbers of its own queue, then receives its QPs' packets
// and no other loop's.
//
// The kernel's GRO joins the datagrams of one flow (4-tuple) before the
// program sees them, and the program sees the first's BTH only: where
// several QPs share a 4-tuple (a peer that sends every QP from one UDP
// port, as this package does), a joined buffer may carry another
// queue's packets. A reader must hand those on (transport.NewDevices
// does).
type Queues struct {
	// Conns are the group's sockets, in queue order: Conns[i] receives
	// queue i. Each is closed by its own Close (its device's).
	Conns []*Conn

	mu     sync.Mutex // guards objs and closed
	objs   steerObjects
	closed bool
}

// ListenQueues opens n conns on opts.Addr, a unicast address, and steers
// its datagrams between them. It needs CAP_BPF and CAP_NET_ADMIN (root)
// for n above 1; n of 1 is Listen's one conn and no program. An address
// that another socket holds is refused as Listen refuses it: the group
// takes no socket but its own.
func ListenQueues(opts Options, n int) (*Queues, error) {
	if n < 1 || n > roce.MaxQueues {
		return nil, fmt.Errorf("udpconn: listen on %v: %d queues: want 1 to %d", opts.Addr, n, roce.MaxQueues)
	}
	if n == 1 {
		c, err := Listen(opts)
		if err != nil {
			return nil, err
		}
		return &Queues{Conns: []*Conn{c}}, nil
	}
	if opts.Addr.Addr().Unmap().IsMulticast() {
		return nil, fmt.Errorf("udpconn: listen on group %v: queues are for a unicast address", opts.Addr.Addr())
	}
	// A socket without SO_REUSEPORT first: it fails where any socket
	// holds the address (another gateway, another leg), which a group's
	// bind would join instead when that one has SO_REUSEPORT too.
	probe := opts
	probe.BusyPoll, probe.NoGSO, probe.NoGRO = false, true, true
	pc, err := Listen(probe)
	if err != nil {
		return nil, err
	}
	addr := pc.LocalAddr()
	pc.Close()

	spec, err := loadSteer()
	if err != nil {
		return nil, fmt.Errorf("udpconn: load the reuseport program's spec: %w", err)
	}
	if err := spec.Variables["queues"].Set(uint32(n)); err != nil {
		return nil, fmt.Errorf("udpconn: reuseport program: set queues: %w", err)
	}
	q := &Queues{}
	if err := spec.LoadAndAssign(&q.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("udpconn: load the reuseport program: %+v", ve)
		}
		return nil, fmt.Errorf("udpconn: load the reuseport program: %w", err)
	}
	opts.Addr, opts.reusePort = addr, true
	for i := range n {
		c, err := Listen(opts)
		if err == nil {
			err = q.put(i, c)
			q.Conns = append(q.Conns, c)
		}
		if err != nil {
			q.closeAll()
			return nil, fmt.Errorf("udpconn: queue %d of %d on %v: %w", i, n, addr, err)
		}
	}
	var serr error
	if err := q.Conns[0].rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, q.objs.Steer.FD())
	}); err == nil {
		err = serr
	}
	if err != nil {
		q.closeAll()
		return nil, fmt.Errorf("udpconn: attach the reuseport program to %v: %w", addr, err)
	}
	return q, nil
}

// put makes c the group's socket for queue i.
func (q *Queues) put(i int, c *Conn) error {
	var perr error
	if err := c.rc.Control(func(fd uintptr) {
		perr = q.objs.Sockets.Put(uint32(i), uint64(fd))
	}); err != nil {
		return err
	}
	if perr != nil {
		return fmt.Errorf("put the socket in the reuseport map: %w", perr)
	}
	return nil
}

func (q *Queues) closeAll() {
	for _, c := range q.Conns {
		c.Close()
	}
	q.Close()
}

// Counters reads the program's counters; zero for a single queue.
func (q *Queues) Counters() (SteerCounters, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out SteerCounters
	if q.objs.Counters == nil || q.closed {
		return out, nil
	}
	for _, f := range []struct {
		c   steerCounter
		dst *uint64
	}{{steerCounterCOUNTER_STEERED, &out.Steered}, {steerCounterCOUNTER_SHORT, &out.Short}, {steerCounterCOUNTER_FAILED, &out.Failed}} {
		var per []uint64
		if err := q.objs.Counters.Lookup(uint32(f.c), &per); err != nil {
			return out, fmt.Errorf("udpconn: read the reuseport program's counters: %w", err)
		}
		for _, v := range per {
			*f.dst += v
		}
	}
	return out, nil
}

// Close frees the program and its maps; the conns stay open (each is
// closed by its own Close), and the group keeps the program until its
// last socket closes. It is idempotent.
func (q *Queues) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	if err := q.objs.Close(); err != nil {
		return fmt.Errorf("udpconn: close the reuseport program: %w", err)
	}
	return nil
}
