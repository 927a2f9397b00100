package transport

import (
	"fmt"
	"net/netip"
	"sync"
	"unsafe"

	"github.com/rbridge/rbridge/roce"
)

// Access is the set of rights a memory region grants (IBV_ACCESS_*).
type Access uint32

// Access rights. Local read is always granted.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
	AccessRemoteAtomic
)

// ErrNotSupported matches operations this transport does not implement:
// roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// MR is a registered memory region. The buffer must stay valid (and, for
// memory shared with hardware, pinned) until Deregister.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64 // the virtual address peers use for buf[0]
	lkey   uint32
	rkey   uint32
	access Access
}

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr returns the address of Buf()[0] as peers name it in RETH and
// AtomicETH.
func (m *MR) Addr() uint64 { return m.addr }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// slice returns the bytes [va, va+n) of the region if they lie inside it.
func (m *MR) slice(va uint64, n uint32) ([]byte, bool) {
	if va < m.addr {
		return nil, false
	}
	off := va - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

// PD is a protection domain: the memory regions its QPs may touch.
type PD struct {
	mu      sync.RWMutex // guards the fields below
	mrs     map[uint32]*MR
	nextKey uint32
}

// NewPD returns an empty protection domain.
func NewPD() *PD { return &PD{mrs: make(map[uint32]*MR), nextKey: 0x100} }

// RegisterMR registers buf with the given rights. Its address is that of
// buf[0] in this process, as verbs does for user memory.
func (pd *PD) RegisterMR(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("register MR: empty buffer")
	}
	return pd.RegisterMRAt(buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access)
}

// RegisterMRAt registers buf with the address peers will use for buf[0].
func (pd *PD) RegisterMRAt(buf []byte, addr uint64, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("register MR: empty buffer")
	}
	if addr+uint64(len(buf)) < addr {
		return nil, fmt.Errorf("register MR: address %#x + %d bytes wraps", addr, len(buf))
	}
	if access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0 {
		return nil, fmt.Errorf("register MR: remote write or atomic access needs local write (as verbs requires)")
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	key := pd.nextKey
	pd.nextKey += 0x100 // the low byte is the key's variant, as in hardware
	m := &MR{pd: pd, buf: buf, addr: addr, lkey: key, rkey: key, access: access}
	pd.mrs[key] = m
	return m, nil
}

// Deregister removes the region; later accesses through its keys fail.
func (m *MR) Deregister() error {
	m.pd.mu.Lock()
	defer m.pd.mu.Unlock()
	if m.pd.mrs[m.rkey] != m {
		return fmt.Errorf("deregister MR rkey %#x: not registered", m.rkey)
	}
	delete(m.pd.mrs, m.rkey)
	return nil
}

// lookup returns the region of key if it grants need.
func (pd *PD) lookup(key uint32, need Access) (*MR, bool) {
	pd.mu.RLock()
	m := pd.mrs[key]
	pd.mu.RUnlock()
	if m == nil || m.access&need != need {
		return nil, false
	}
	return m, true
}

// SGE is a scatter/gather element: bytes of a registered region.
type SGE struct {
	MR     *MR
	Offset int
	Length int
}

func (s SGE) bytes() ([]byte, error) {
	if s.Length == 0 {
		return nil, nil
	}
	if s.MR == nil {
		return nil, fmt.Errorf("SGE of %d bytes without an MR", s.Length)
	}
	if s.Offset < 0 || s.Length < 0 || s.Offset > len(s.MR.buf) || s.Length > len(s.MR.buf)-s.Offset {
		return nil, fmt.Errorf("SGE [%d, +%d) outside MR of %d bytes", s.Offset, s.Length, len(s.MR.buf))
	}
	return s.MR.buf[s.Offset : s.Offset+s.Length], nil
}

// Opcode is the operation of a send work request (IBV_WR_*).
type Opcode uint8

// Send work request opcodes.
const (
	OpSend Opcode = iota
	OpSendWithImm
	OpSendWithInv
	OpWrite
	OpWriteWithImm
	OpRead
	OpCompareSwap
	OpFetchAdd
	// OpRecv and OpRecvWriteWithImm appear only in receive completions.
	OpRecv
	OpRecvWriteWithImm
)

var opNames = [...]string{"SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "RECV", "RECV_RDMA_WITH_IMM"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", o)
}

// SendWR is a send work request.
type SendWR struct {
	ID       uint64
	Opcode   Opcode
	Local    SGE    // data to send or write; destination of a read or atomic (8 bytes)
	Remote   uint64 // remote address (write, read, atomic)
	RKey     uint32 // remote key (write, read, atomic)
	Imm      uint32 // immediate data (SEND_WITH_IMM, RDMA_WRITE_WITH_IMM)
	InvRKey  uint32 // rkey to invalidate (SEND_WITH_INV)
	Compare  uint64 // COMPARE_SWAP
	SwapAdd  uint64 // swap value or addend
	Signaled bool   // produce a completion on success
	Fence    bool   // wait for outstanding READs and atomics before this one
	UD       *UDDest
}

// UDDest is the destination of a UD send (the address handle and remote
// QP of verbs).
type UDDest struct {
	Addr netip.AddrPort
	QPN  uint32
	QKey uint32
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID    uint64
	Local SGE
}

// Status is a completion status (IBV_WC_*).
type Status uint8

// Completion statuses.
const (
	StatusSuccess Status = iota
	StatusLocLenErr
	StatusLocQPOpErr
	StatusLocProtErr
	StatusWRFlushErr
	StatusBadRespErr
	StatusLocAccessErr
	StatusRemInvReqErr
	StatusRemAccessErr
	StatusRemOpErr
	StatusRetryExcErr
	StatusRNRRetryExcErr
)

var statusNames = [...]string{"success", "local length error", "local QP operation error",
	"local protection error", "WR flushed", "bad response", "local access error",
	"remote invalid request", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", s)
}

// WC is a work completion.
type WC struct {
	ID      uint64
	Status  Status
	Opcode  Opcode
	ByteLen int
	Imm     uint32
	HasImm  bool
	InvRKey uint32 // SEND_WITH_INV: the rkey the sender invalidated
	HasInv  bool
	QPN     uint32
	SrcQPN  uint32         // UD: the sender's QP
	Src     netip.AddrPort // UD: the sender's address
}
