//go:build linux && cgo && !noibverbs

package ibv

/*
#cgo LDFLAGS: -libverbs
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

// ibv_query_port and ibv_query_gid_table are macros or static inlines.
static int rb_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a) {
	memset(a, 0, sizeof(*a));
	return ibv_query_port(ctx, port, a);
}
static ssize_t rb_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t n) {
	return ibv_query_gid_table(ctx, e, n, 0);
}
// rb_get_device_list returns the list, or NULL with *err set (0: no devices).
static struct ibv_device **rb_get_device_list(int *num, int *err) {
	errno = 0;
	struct ibv_device **l = ibv_get_device_list(num);
	*err = l ? 0 : errno;
	return l;
}
static struct ibv_device *rb_device_at(struct ibv_device **l, int i) { return l[i]; }
static struct ibv_context *rb_open_device(struct ibv_device *d, int *err) {
	errno = 0;
	struct ibv_context *c = ibv_open_device(d);
	*err = c ? 0 : (errno ? errno : ENODEV);
	return c;
}
static int rb_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
	return ibv_get_async_event(ctx, ev) ? errno : 0;
}
static uintptr_t rb_event_qp_context(struct ibv_async_event *ev) { return (uintptr_t)ev->element.qp->qp_context; }
static uint32_t rb_event_qpn(struct ibv_async_event *ev) { return ev->element.qp->qp_num; }
static uintptr_t rb_event_cq_context(struct ibv_async_event *ev) { return (uintptr_t)ev->element.cq->cq_context; }
static uintptr_t rb_event_srq_context(struct ibv_async_event *ev) { return (uintptr_t)ev->element.srq->srq_context; }
static int rb_event_port(struct ibv_async_event *ev) { return ev->element.port_num; }
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Device is an open RDMA device (struct ibv_context).
type Device struct {
	res   resource
	ctx   *C.struct_ibv_context
	name  string
	owned bool // false for rdma_cm's shared contexts: Close frees children only

	asyncMu   sync.Mutex              // serializes AsyncEvent
	asyncFile atomic.Pointer[os.File] // set once, by AsyncEvent
}

// DeviceNames lists the RDMA devices of this machine ("mlx5_0", "rxe0").
// With no devices, or a kernel without RDMA support, the list is empty.
func DeviceNames() ([]string, error) {
	var num, cerr C.int
	list := C.rb_get_device_list(&num, &cerr)
	if list == nil {
		if cerr == 0 || syscall.Errno(cerr) == syscall.ENOSYS || syscall.Errno(cerr) == syscall.ENOENT {
			return []string{}, nil
		}
		return nil, fmt.Errorf("ibv_get_device_list: %w", syscall.Errno(cerr))
	}
	defer C.ibv_free_device_list(list)
	names := make([]string, 0, int(num))
	for i := range int(num) {
		names = append(names, C.GoString(C.ibv_get_device_name(C.rb_device_at(list, C.int(i)))))
	}
	return names, nil
}

// OpenDevice opens the RDMA device called name.
func OpenDevice(name string) (*Device, error) {
	var num, cerr C.int
	list := C.rb_get_device_list(&num, &cerr)
	if list == nil {
		if cerr == 0 {
			cerr = C.int(syscall.ENODEV)
		}
		return nil, fmt.Errorf("open device %s: ibv_get_device_list: %w", name, syscall.Errno(cerr))
	}
	defer C.ibv_free_device_list(list)
	for i := range int(num) {
		dev := C.rb_device_at(list, C.int(i))
		if C.GoString(C.ibv_get_device_name(dev)) != name {
			continue
		}
		d := &Device{name: name, owned: true}
		err := d.res.create(kindDevice, nil, func() (func() error, error) {
			var oerr C.int
			d.ctx = C.rb_open_device(dev, &oerr)
			if d.ctx == nil {
				return nil, fmt.Errorf("ibv_open_device %s: %w", name, syscall.Errno(oerr))
			}
			return d.free, nil
		})
		if err != nil {
			return nil, err
		}
		d.res.interrupt = d.interrupt
		return d, nil
	}
	return nil, fmt.Errorf("open device %s: no such device: %w", name, syscall.ENODEV)
}

var (
	sharedMu      sync.Mutex
	sharedDevices = map[*C.struct_ibv_context]*Device{}
)

// sharedDevice wraps a context owned by librdmacm (rdma_cm opens every
// device once per process). PDs and CQs for a cm_id's QP must come from it.
func sharedDevice(ctx *C.struct_ibv_context) *Device {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if d := sharedDevices[ctx]; d != nil && !d.res.isClosed() {
		return d
	}
	d := &Device{ctx: ctx, name: C.GoString(C.ibv_get_device_name(ctx.device))}
	d.res.create(kindUncounted, nil, func() (func() error, error) { return d.free, nil })
	d.res.interrupt = d.interrupt
	sharedDevices[ctx] = d
	return d
}

func (d *Device) interrupt() {
	if f := d.asyncFile.Load(); f != nil {
		f.Close()
	}
}

// free closes the context; with d.res.op held.
func (d *Device) free() error {
	if !d.owned {
		sharedMu.Lock()
		if sharedDevices[d.ctx] == d {
			delete(sharedDevices, d.ctx)
		}
		sharedMu.Unlock()
		return nil
	}
	if rc := C.ibv_close_device(d.ctx); rc != 0 {
		return fmt.Errorf("ibv_close_device %s: %w", d.name, syscall.Errno(-rc))
	}
	return nil
}

// Close closes the device and, first, everything made from it. It is
// idempotent.
func (d *Device) Close() error {
	if d == nil {
		return nil
	}
	return d.res.close()
}

// Name is the device's name.
func (d *Device) Name() string { return d.name }

// Info queries the device, its ports and their GID tables.
func (d *Device) Info() (DeviceInfo, error) {
	if err := d.res.acquire(); err != nil {
		return DeviceInfo{}, err
	}
	defer d.res.op.RUnlock()
	info, err := d.queryLocked()
	if err != nil {
		return DeviceInfo{}, err
	}
	total := 0
	for p := 1; p <= info.Attr.PhysPortCnt; p++ {
		pi, err := d.queryPortLocked(p)
		if err != nil {
			return DeviceInfo{}, err
		}
		total += pi.GIDTableLen
		info.Ports = append(info.Ports, pi)
	}
	gids, err := d.gidTableLocked(total)
	if err != nil {
		return DeviceInfo{}, err
	}
	for _, g := range gids {
		if g.Port >= 1 && g.Port <= len(info.Ports) {
			info.Ports[g.Port-1].GIDs = append(info.Ports[g.Port-1].GIDs, g)
		}
	}
	for i := range info.Ports {
		if info.Ports[i].GIDs == nil {
			info.Ports[i].GIDs = []GIDEntry{}
		}
	}
	return info, nil
}

// Attr queries the device's limits and capabilities (ibv_query_device),
// without its ports: what a caller checks before it relies on a feature
// (DeviceAttr.MWType2: memory windows bound on a QP).
func (d *Device) Attr() (DeviceAttr, error) {
	if err := d.res.acquire(); err != nil {
		return DeviceAttr{}, err
	}
	defer d.res.op.RUnlock()
	info, err := d.queryLocked()
	return info.Attr, err
}

// queryLocked is ibv_query_device: the device's part of Info, no ports.
func (d *Device) queryLocked() (DeviceInfo, error) {
	var a C.struct_ibv_device_attr
	if rc := C.ibv_query_device(d.ctx, &a); rc != 0 {
		return DeviceInfo{}, fmt.Errorf("ibv_query_device %s: %w", d.name, syscall.Errno(rc))
	}
	return DeviceInfo{
		Name:            d.name,
		Transport:       Transport(d.ctx.device.transport_type),
		NodeGUID:        guidString(uint64(a.node_guid)),
		SysImageGUID:    guidString(uint64(a.sys_image_guid)),
		FirmwareVersion: C.GoString(&a.fw_ver[0]),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVersion:       uint32(a.hw_ver),
		Attr: DeviceAttr{
			MaxMRSize:       uint64(a.max_mr_size),
			MaxQP:           int(a.max_qp),
			MaxQPWR:         int(a.max_qp_wr),
			MaxSGE:          int(a.max_sge),
			MaxCQ:           int(a.max_cq),
			MaxCQE:          int(a.max_cqe),
			MaxMR:           int(a.max_mr),
			MaxPD:           int(a.max_pd),
			MaxQPRdAtom:     int(a.max_qp_rd_atom),
			MaxQPInitRdAtom: int(a.max_qp_init_rd_atom),
			MaxSRQ:          int(a.max_srq),
			MaxSRQWR:        int(a.max_srq_wr),
			MaxAH:           int(a.max_ah),
			AtomicCap:       [...]string{"none", "HCA", "global"}[min(uint(a.atomic_cap), 2)],
			PhysPortCnt:     int(a.phys_port_cnt),
			LocalCAAckDelay: int(a.local_ca_ack_delay),
			CapFlags:        DeviceCap(a.device_cap_flags),
			MaxMW:           int(a.max_mw),
		},
	}, nil
}

// guidString formats a big-endian GUID as ibv_devinfo does (xxxx:xxxx:xxxx:xxxx).
func guidString(be uint64) string {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], be)
	return fmt.Sprintf("%04x:%04x:%04x:%04x", binary.BigEndian.Uint16(b[0:]), binary.BigEndian.Uint16(b[2:]),
		binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]))
}

// QueryPort queries port (1-based), without its GID table.
func (d *Device) QueryPort(port int) (PortInfo, error) {
	if err := d.res.acquire(); err != nil {
		return PortInfo{}, err
	}
	defer d.res.op.RUnlock()
	return d.queryPortLocked(port)
}

func (d *Device) queryPortLocked(port int) (PortInfo, error) {
	var a C.struct_ibv_port_attr
	if rc := C.rb_query_port(d.ctx, C.uint8_t(port), &a); rc != 0 {
		return PortInfo{}, fmt.Errorf("ibv_query_port %s port %d: %w", d.name, port, syscall.Errno(rc))
	}
	return PortInfo{
		Port:        port,
		State:       PortState(a.state),
		PhysState:   PhysState(a.phys_state),
		LinkLayer:   LinkLayer(a.link_layer),
		MaxMTU:      MTU(a.max_mtu),
		ActiveMTU:   MTU(a.active_mtu),
		LID:         uint16(a.lid),
		SMLID:       uint16(a.sm_lid),
		LMC:         uint8(a.lmc),
		Speed:       Speed(a.active_speed),
		Width:       Width(a.active_width),
		GIDTableLen: int(a.gid_tbl_len),
	}, nil
}

// GIDTable lists the valid GID entries of every port, with type and netdev.
func (d *Device) GIDTable() ([]GIDEntry, error) {
	info, err := d.Info()
	if err != nil {
		return nil, err
	}
	var out []GIDEntry
	for _, p := range info.Ports {
		out = append(out, p.GIDs...)
	}
	return out, nil
}

func (d *Device) gidTableLocked(max int) ([]GIDEntry, error) {
	if max == 0 {
		return nil, nil
	}
	es := make([]C.struct_ibv_gid_entry, max)
	n := C.rb_query_gid_table(d.ctx, &es[0], C.size_t(max))
	if n < 0 {
		return nil, fmt.Errorf("ibv_query_gid_table %s: %w", d.name, syscall.Errno(-n))
	}
	out := make([]GIDEntry, 0, int(n))
	for _, e := range es[:n] {
		g := GIDEntry{
			Device:  d.name,
			Port:    int(e.port_num),
			Index:   int(e.gid_index),
			GID:     *(*GID)(unsafe.Pointer(&e.gid)),
			Type:    GIDType(e.gid_type),
			Ifindex: int(e.ndev_ifindex),
		}
		if g.Ifindex != 0 {
			if ifc, err := net.InterfaceByIndex(g.Ifindex); err == nil {
				g.Netdev = ifc.Name
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// ChooseGID picks the RoCEv2 GID of this device for q (see the package
// function ChooseGID).
func (d *Device) ChooseGID(q GIDQuery) (GIDChoice, error) {
	t, err := d.GIDTable()
	if err != nil {
		return GIDChoice{}, err
	}
	q.Device = d.name
	return ChooseGID(t, q)
}

// QueryDevices describes every RDMA device of the machine. With none, the
// result is empty.
func QueryDevices() ([]DeviceInfo, error) {
	names, err := DeviceNames()
	if err != nil {
		return nil, err
	}
	out := make([]DeviceInfo, 0, len(names))
	for _, n := range names {
		d, err := OpenDevice(n)
		if err != nil {
			return nil, err
		}
		info, err := d.Info()
		cerr := d.Close()
		if err = errors.Join(err, cerr); err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// AsyncEvent waits for the device's next asynchronous event (a QP fatal
// error, a port going down, ...) and acknowledges it. It sleeps in Go's
// poller, not on a thread. Only one goroutine should call it.
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	d.asyncMu.Lock()
	defer d.asyncMu.Unlock()
	if err := d.res.acquire(); err != nil {
		return AsyncEvent{}, err
	}
	defer d.res.op.RUnlock()
	f := d.asyncFile.Load()
	if f == nil {
		var err error
		if f, err = pollFile(int(d.ctx.async_fd), d.name+" async events"); err != nil {
			return AsyncEvent{}, err
		}
		d.asyncFile.Store(f)
	}
	var ev C.struct_ibv_async_event
	var rc C.int
	err := waitRead(ctx, f, func() bool {
		rc = C.rb_get_async_event(d.ctx, &ev)
		return syscall.Errno(rc) != syscall.EAGAIN
	})
	if err != nil {
		return AsyncEvent{}, fmt.Errorf("async event %s: %w", d.name, err)
	}
	if rc != 0 {
		return AsyncEvent{}, fmt.Errorf("ibv_get_async_event %s: %w", d.name, syscall.Errno(rc))
	}
	defer C.ibv_ack_async_event(&ev)
	out := AsyncEvent{Type: AsyncEventType(ev.event_type)}
	switch out.Type {
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained,
		EventPathMig, EventPathMigErr, EventQPLastWQE:
		out.QPN = uint32(C.rb_event_qpn(&ev))
		if h := C.rb_event_qp_context(&ev); h != 0 {
			out.QP, _ = cgo.Handle(h).Value().(*QP)
		}
	case EventCQErr:
		if h := C.rb_event_cq_context(&ev); h != 0 {
			out.CQ, _ = cgo.Handle(h).Value().(*CQ)
		}
	case EventSRQErr, EventSRQLimitReached:
		if h := C.rb_event_srq_context(&ev); h != 0 {
			out.SRQ, _ = cgo.Handle(h).Value().(*SRQ)
		}
	case EventPortActive, EventPortErr, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		out.Port = int(C.rb_event_port(&ev))
	}
	return out, nil
}
