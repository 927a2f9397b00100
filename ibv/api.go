package ibv

import (
	"context"
	"net/netip"
	"time"
)

// The method sets every build must offer: the cgo binding (*_linux.go) and
// stub.go are checked against the same list, so they cannot drift apart.
var (
	_ interface {
		Close() error
		Name() string
		Info() (DeviceInfo, error)
		QueryPort(int) (PortInfo, error)
		GIDTable() ([]GIDEntry, error)
		ChooseGID(GIDQuery) (GIDChoice, error)
		AsyncEvent(context.Context) (AsyncEvent, error)
		Attr() (DeviceAttr, error)
		AllocPD() (*PD, error)
		NewCQ(CQOptions) (*CQ, error)
	} = (*Device)(nil)
	_ interface {
		Close() error
		Device() *Device
		RegMR([]byte, Access) (*MR, error)
		NewQP(QPOptions) (*QP, error)
		NewAH(AHAttr) (*AH, error)
		NewSRQ(SRQOptions) (*SRQ, error)
		AllocMW(MWType) (*MW, error)
	} = (*PD)(nil)
	_ interface {
		Close() error
		Type() MWType
		RKey() uint32
		NextRKey() uint32
		BindCompleted(WCStatus) error
	} = (*MW)(nil)
	_ interface {
		Close() error
		LKey() uint32
		RKey() uint32
		Addr() uint64
		Bytes() []byte
		Access() Access
		SGE(int, int) (SGE, error)
	} = (*MR)(nil)
	_ interface {
		Close() error
		Entries() int
		Poll([]WorkCompletion) (int, error)
		Wait(context.Context, []WorkCompletion) (int, error)
	} = (*CQ)(nil)
	_ interface {
		Close() error
		QPN() uint32
		Type() QPType
		PD() *PD
		Cap() QPCap
		Modify(*QPAttr, QPAttrMask) error
		Query() (QPAttr, error)
		PostSend([]SendWR) (int, error)
		PostRecv([]RecvWR) (int, error)
	} = (*QP)(nil)
	_ interface {
		Close() error
		Attr() AHAttr
	} = (*AH)(nil)
	_ interface {
		Close() error
		PostRecv([]RecvWR) (int, error)
		Arm(uint32) error
	} = (*SRQ)(nil)
	_ interface {
		Close() error
		NewID(PortSpace) (*CMID, error)
		Next(context.Context) (CMEvent, error)
		Expect(context.Context, CMEventType) (CMEvent, error)
	} = (*EventChannel)(nil)
	_ interface {
		Close() error
		ResolveAddr(netip.Addr, netip.AddrPort, time.Duration) error
		ResolveRoute(time.Duration) error
		Bind(netip.AddrPort) error
		Listen(int) error
		LocalAddr() netip.AddrPort
		RemoteAddr() netip.AddrPort
		Device() (*Device, error)
		Port() int
		PathMTU() MTU
		CreateQP(*PD, QPOptions) (*QP, error)
		QP() *QP
		Connect(ConnParam) error
		Accept(ConnParam) error
		Reject([]byte) error
		Disconnect() error
		JoinMulticast(netip.Addr, JoinOptions) error
		LeaveMulticast(netip.Addr) error
	} = (*CMID)(nil)
	_ interface {
		Bytes() []byte
		HugePages() bool
		Close() error
	} = (*Arena)(nil)

	_ = DeviceNames
	_ = QueryDevices
	_ = OpenDevice
	_ = NewEventChannel
	_ = MapArena
)
