//go:build !linux || !cgo || noibverbs

package ibv

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// This build has no libibverbs/librdmacm binding (no cgo, not Linux, or the
// noibverbs tag): every type exists so that callers compile, and every
// constructor fails with an error matching ErrNotSupported.

var errNoBinding = fmt.Errorf("rbridge was built without RDMA support (cgo, libibverbs and librdmacm are needed; build with CGO_ENABLED=1 on Linux, without -tags noibverbs): %w", ErrNotSupported)

// Device is an open RDMA device (unavailable in this build).
type Device struct{ res resource }

// PD is a protection domain (unavailable in this build).
type PD struct{ res resource }

// MR is a memory region (unavailable in this build).
type MR struct{ res resource }

// MW is a memory window (unavailable in this build).
type MW struct{ res resource }

// CQ is a completion queue (unavailable in this build).
type CQ struct{ res resource }

// QP is a queue pair (unavailable in this build).
type QP struct{ res resource }

// AH is an address handle (unavailable in this build).
type AH struct{ res resource }

// SRQ is a shared receive queue (unavailable in this build).
type SRQ struct{ res resource }

// EventChannel is an rdma_cm event channel (unavailable in this build).
type EventChannel struct{ res resource }

// CMID is an rdma_cm id (unavailable in this build).
type CMID struct{ res resource }

// DeviceNames fails: no RDMA support in this build.
func DeviceNames() ([]string, error) { return nil, errNoBinding }

// QueryDevices fails: no RDMA support in this build.
func QueryDevices() ([]DeviceInfo, error) { return nil, errNoBinding }

// OpenDevice fails: no RDMA support in this build.
func OpenDevice(name string) (*Device, error) {
	return nil, fmt.Errorf("open device %s: %w", name, errNoBinding)
}

// NewEventChannel fails: no RDMA support in this build.
func NewEventChannel() (*EventChannel, error) { return nil, errNoBinding }

func (d *Device) Close() error                            { return nil }
func (d *Device) Name() string                            { return "" }
func (d *Device) Info() (DeviceInfo, error)               { return DeviceInfo{}, errNoBinding }
func (d *Device) QueryPort(port int) (PortInfo, error)    { return PortInfo{}, errNoBinding }
func (d *Device) GIDTable() ([]GIDEntry, error)           { return nil, errNoBinding }
func (d *Device) ChooseGID(q GIDQuery) (GIDChoice, error) { return GIDChoice{}, errNoBinding }
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	return AsyncEvent{}, errNoBinding
}
func (d *Device) Attr() (DeviceAttr, error)         { return DeviceAttr{}, errNoBinding }
func (d *Device) AllocPD() (*PD, error)             { return nil, errNoBinding }
func (d *Device) NewCQ(opts CQOptions) (*CQ, error) { return nil, errNoBinding }

func (pd *PD) Close() error                                 { return nil }
func (pd *PD) Device() *Device                              { return nil }
func (pd *PD) RegMR(mem []byte, access Access) (*MR, error) { return nil, errNoBinding }
func (pd *PD) NewQP(opts QPOptions) (*QP, error)            { return nil, errNoBinding }
func (pd *PD) NewAH(attr AHAttr) (*AH, error)               { return nil, errNoBinding }
func (pd *PD) NewSRQ(opts SRQOptions) (*SRQ, error)         { return nil, errNoBinding }
func (pd *PD) AllocMW(typ MWType) (*MW, error)              { return nil, errNoBinding }

func (mw *MW) Close() error                        { return nil }
func (mw *MW) Type() MWType                        { return 0 }
func (mw *MW) RKey() uint32                        { return 0 }
func (mw *MW) NextRKey() uint32                    { return 0 }
func (mw *MW) BindCompleted(status WCStatus) error { return errNoBinding }

func (mr *MR) Close() error                { return nil }
func (mr *MR) LKey() uint32                { return 0 }
func (mr *MR) RKey() uint32                { return 0 }
func (mr *MR) Addr() uint64                { return 0 }
func (mr *MR) Bytes() []byte               { return nil }
func (mr *MR) Access() Access              { return 0 }
func (mr *MR) SGE(off, n int) (SGE, error) { return SGE{}, errNoBinding }

func (cq *CQ) Close() error                                                { return nil }
func (cq *CQ) Entries() int                                                { return 0 }
func (cq *CQ) Poll(wcs []WorkCompletion) (int, error)                      { return 0, errNoBinding }
func (cq *CQ) Wait(ctx context.Context, wcs []WorkCompletion) (int, error) { return 0, errNoBinding }

func (q *QP) Close() error                               { return nil }
func (q *QP) QPN() uint32                                { return 0 }
func (q *QP) Type() QPType                               { return 0 }
func (q *QP) PD() *PD                                    { return nil }
func (q *QP) Cap() QPCap                                 { return QPCap{} }
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error { return errNoBinding }
func (q *QP) Query() (QPAttr, error)                     { return QPAttr{}, errNoBinding }
func (q *QP) PostSend(wrs []SendWR) (int, error)         { return 0, errNoBinding }
func (q *QP) PostRecv(wrs []RecvWR) (int, error)         { return 0, errNoBinding }

func (ah *AH) Close() error { return nil }
func (ah *AH) Attr() AHAttr { return AHAttr{} }

func (s *SRQ) Close() error                       { return nil }
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) { return 0, errNoBinding }
func (s *SRQ) Arm(limit uint32) error             { return errNoBinding }

func (ec *EventChannel) Close() error                              { return nil }
func (ec *EventChannel) NewID(ps PortSpace) (*CMID, error)         { return nil, errNoBinding }
func (ec *EventChannel) Next(ctx context.Context) (CMEvent, error) { return CMEvent{}, errNoBinding }
func (ec *EventChannel) Expect(ctx context.Context, want CMEventType) (CMEvent, error) {
	return CMEvent{}, errNoBinding
}

func (id *CMID) Close() error { return nil }
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	return errNoBinding
}
func (id *CMID) ResolveRoute(timeout time.Duration) error     { return errNoBinding }
func (id *CMID) Bind(addr netip.AddrPort) error               { return errNoBinding }
func (id *CMID) Listen(backlog int) error                     { return errNoBinding }
func (id *CMID) LocalAddr() netip.AddrPort                    { return netip.AddrPort{} }
func (id *CMID) RemoteAddr() netip.AddrPort                   { return netip.AddrPort{} }
func (id *CMID) Device() (*Device, error)                     { return nil, errNoBinding }
func (id *CMID) Port() int                                    { return 0 }
func (id *CMID) PathMTU() MTU                                 { return 0 }
func (id *CMID) CreateQP(pd *PD, opts QPOptions) (*QP, error) { return nil, errNoBinding }
func (id *CMID) QP() *QP                                      { return nil }
func (id *CMID) Connect(p ConnParam) error                    { return errNoBinding }
func (id *CMID) Accept(p ConnParam) error                     { return errNoBinding }
func (id *CMID) Reject(privateData []byte) error              { return errNoBinding }
func (id *CMID) Disconnect() error                            { return errNoBinding }
func (id *CMID) JoinMulticast(group netip.Addr, opts JoinOptions) error {
	return errNoBinding
}
func (id *CMID) LeaveMulticast(group netip.Addr) error { return errNoBinding }
