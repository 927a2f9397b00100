//go:build linux && cgo && !noibverbs

package ibv

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *rb_create_event_channel(int *err) {
	errno = 0;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	*err = ch ? 0 : (errno ? errno : ENODEV);
	return ch;
}
static int rb_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, uintptr_t h, int ps) {
	return rdma_create_id(ch, id, (void *)h, ps) ? errno : 0;
}
static void rb_set_context(struct rdma_cm_id *id, uintptr_t h) { id->context = (void *)h; }
static uintptr_t rb_context(struct rdma_cm_id *id) { return (uintptr_t)id->context; }

// rb_sockaddr fills ss with an IPv4 (len 4) or IPv6 (len 16) address.
static socklen_t rb_sockaddr(struct sockaddr_storage *ss, const uint8_t *ip, int len, uint16_t port, uint32_t scope) {
	memset(ss, 0, sizeof(*ss));
	if (len == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
		return sizeof(*s);
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	s->sin6_scope_id = scope;
	memcpy(&s->sin6_addr, ip, 16);
	return sizeof(*s);
}
// rb_sockaddr_get reads an address back; returns its length (4, 16) or 0.
static int rb_sockaddr_get(const struct sockaddr *sa, uint8_t *ip, uint16_t *port) {
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 16;
	}
	return 0;
}
static int rb_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *src, int has_src, struct sockaddr_storage *dst, int ms) {
	return rdma_resolve_addr(id, has_src ? (struct sockaddr *)src : NULL, (struct sockaddr *)dst, ms) ? errno : 0;
}
static int rb_resolve_route(struct rdma_cm_id *id, int ms) { return rdma_resolve_route(id, ms) ? errno : 0; }
static int rb_bind_addr(struct rdma_cm_id *id, struct sockaddr_storage *a) { return rdma_bind_addr(id, (struct sockaddr *)a) ? errno : 0; }
static int rb_listen(struct rdma_cm_id *id, int backlog) { return rdma_listen(id, backlog) ? errno : 0; }

static void rb_conn_param(struct rdma_conn_param *p, const void *pd, int pdlen, uint8_t rr, uint8_t idepth, uint8_t fc, uint8_t retry, uint8_t rnr, uint32_t qpn, uint8_t srq) {
	memset(p, 0, sizeof(*p));
	p->qp_num = qpn;
	p->srq = srq;
	p->private_data = pdlen ? pd : NULL;
	p->private_data_len = pdlen;
	p->responder_resources = rr;
	p->initiator_depth = idepth;
	p->flow_control = fc;
	p->retry_count = retry;
	p->rnr_retry_count = rnr;
}
static int rb_connect(struct rdma_cm_id *id, struct rdma_conn_param *p) { return rdma_connect(id, p) ? errno : 0; }
static int rb_accept(struct rdma_cm_id *id, struct rdma_conn_param *p) { return rdma_accept(id, p) ? errno : 0; }
static int rb_reject(struct rdma_cm_id *id, const void *pd, int pdlen) { return rdma_reject(id, pdlen ? pd : NULL, pdlen) ? errno : 0; }
static int rb_disconnect(struct rdma_cm_id *id) { return rdma_disconnect(id) ? errno : 0; }
static int rb_destroy_id(struct rdma_cm_id *id) { return rdma_destroy_id(id) ? errno : 0; }
static int rb_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev) { return rdma_get_cm_event(ch, ev) ? errno : 0; }
static int rb_cm_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a, uintptr_t h) {
	a->qp_context = (void *)h;
	return rdma_create_qp(id, pd, a) ? errno : 0;
}
static int rb_destroy_qp(struct rdma_cm_id *id) { rdma_destroy_qp(id); return 0; }
static int rb_path_mtu(struct rdma_cm_id *id) { return id->route.num_paths > 0 && id->route.path_rec ? id->route.path_rec->mtu : 0; }

// rbridge's own QP on a cm_id (IB transport): made with ibv_create_qp, so
// librdmacm leaves it alone (id->qp stays NULL) and rbridge moves it, as
// librdmacm's ucma_init_conn_qp, ucma_modify_qp_rtr and ucma_modify_qp_rts
// would, but with path_mtu lowered.
static int rb_cm_is_ib(struct rdma_cm_id *id) { return id->verbs && id->verbs->device->transport_type == IBV_TRANSPORT_IB; }
static struct ibv_qp *rb_cm_own_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uintptr_t h, int *err) {
	errno = 0;
	a->qp_context = (void *)h;
	struct ibv_qp *qp = ibv_create_qp(pd, a);
	*err = qp ? 0 : (errno ? errno : ENOMEM);
	return qp;
}
// rb_cm_port reads the active MTU and link layer of the id's port.
static int rb_cm_port(struct rdma_cm_id *id, int *mtu, int *ll) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof(a));
	int rc = ibv_query_port(id->verbs, id->port_num, &a);
	if (rc) return rc < 0 ? -rc : rc;
	*mtu = a.active_mtu;
	*ll = a.link_layer;
	return 0;
}
static int rb_modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	int rc = ibv_modify_qp(qp, a, mask);
	return rc < 0 ? -rc : rc;
}
// rb_cm_qp_init moves qp to INIT (from RESET, or INIT again) with what rdma_cm gives.
static int rb_cm_qp_init(struct rdma_cm_id *id, struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	int mask;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask)) return errno ? errno : EINVAL;
	return rb_modify(qp, &a, mask);
}
#define RB_MAX_RETRY_CNT 6
// rb_cm_qp_rtr_rts moves qp INIT -> INIT -> RTR -> RTS with the attributes
// rdma_cm gives, path_mtu lowered to cap (0: not lowered), max_dest_rd_atomic
// and max_rd_atomic replaced unless RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH.
// *mtu is the path MTU applied; *step says which call failed (1 INIT, 2 RTR
// attributes, 3 RTR, 4 RTS attributes, 5 RTS).
static int rb_cm_qp_rtr_rts(struct rdma_cm_id *id, struct ibv_qp *qp, int cap, int resp_res, int init_depth, int ib_link, int *mtu, int *step) {
	struct ibv_qp_attr a;
	int mask, rc;
	*step = 1;
	if ((rc = rb_cm_qp_init(id, qp))) return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	*step = 2;
	if (rdma_init_qp_attr(id, &a, &mask)) return errno ? errno : EINVAL;
	// librdmacm's workaround for an rdma_ucm bug: on an InfiniBand link,
	// mask off bits 21-24 (RoCE only).
	if (ib_link) mask &= UINT_MAX ^ 0xe00000;
	if (resp_res != RDMA_MAX_RESP_RES) a.max_dest_rd_atomic = resp_res;
	if (cap > 0 && (int)a.path_mtu > cap) a.path_mtu = (enum ibv_mtu)cap;
	*mtu = a.path_mtu;
	*step = 3;
	if ((rc = rb_modify(qp, &a, mask))) return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	*step = 4;
	if (rdma_init_qp_attr(id, &a, &mask)) return errno ? errno : EINVAL;
	if (init_depth != RDMA_MAX_INIT_DEPTH) a.max_rd_atomic = init_depth;
	// A retry count of 7 (what the REQ of rping, perftest and the kernel's
	// ULPs carry) is seven retries to the IBTA, but rxe (Linux 6.1's
	// rxe_comp.c) reads it as retry forever: a peer that died would never
	// fail this QP's work. 6 is the most retries both read alike.
	if ((mask & IBV_QP_RETRY_CNT) && a.retry_cnt > RB_MAX_RETRY_CNT) a.retry_cnt = RB_MAX_RETRY_CNT;
	*step = 5;
	return rb_modify(qp, &a, mask);
}
static int rb_establish(struct rdma_cm_id *id) { return rdma_establish(id) ? errno : 0; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/cgo"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// EventChannel is an rdma_cm event channel (struct rdma_event_channel):
// every cm_id made from it reports its events here. Next waits in Go's
// poller.
type EventChannel struct {
	res  resource
	ch   *C.struct_rdma_event_channel
	file *os.File
	mu   sync.Mutex // serializes Next
}

// NewEventChannel opens an rdma_cm event channel.
func NewEventChannel() (*EventChannel, error) {
	ec := &EventChannel{}
	err := ec.res.create(kindEventChannel, nil, func() (func() error, error) {
		var cerr C.int
		ec.ch = C.rb_create_event_channel(&cerr)
		if ec.ch == nil {
			return nil, fmt.Errorf("rdma_create_event_channel: %w", syscall.Errno(cerr))
		}
		f, err := pollFile(int(ec.ch.fd), "rdma_cm event channel")
		if err != nil {
			C.rdma_destroy_event_channel(ec.ch)
			return nil, err
		}
		ec.file = f
		return ec.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new event channel: %w", err)
	}
	ec.res.interrupt = func() { ec.file.Close() }
	return ec, nil
}

func (ec *EventChannel) free() error {
	C.rdma_destroy_event_channel(ec.ch)
	return nil
}

// Close destroys the channel and, first, every cm_id on it.
func (ec *EventChannel) Close() error {
	if ec == nil {
		return nil
	}
	return ec.res.close()
}

// CMID is an rdma_cm identifier (struct rdma_cm_id): one connection, or a
// listener. Its context holds a cgo.Handle to the CMID, so events map back
// to Go values.
type CMID struct {
	res    resource
	id     *C.struct_rdma_cm_id
	ch     *EventChannel
	handle cgo.Handle
	ps     PortSpace
	qp     *QP

	// own: qp is rbridge's (RC over the IB transport, see cmmtu.go):
	// made with ibv_create_qp and moved through its states here, with the
	// path MTU lowered; librdmacm's id->qp stays NULL.
	own     bool
	srq     bool
	peerMTU MTU // from the peer's MTU trailer (0: none)
	mtu     MTU // the path MTU applied to own QP
}

// NewID creates a cm_id on the channel, for RC (PortSpaceTCP) or UD
// (PortSpaceUDP, PortSpaceIPoIB).
func (ec *EventChannel) NewID(ps PortSpace) (*CMID, error) {
	id := &CMID{ch: ec, ps: ps}
	err := id.res.create(kindCMID, []*resource{&ec.res}, func() (func() error, error) {
		id.handle = cgo.NewHandle(id)
		if rc := C.rb_create_id(ec.ch, &id.id, C.uintptr_t(id.handle), C.int(ps)); rc != 0 {
			id.handle.Delete()
			return nil, fmt.Errorf("rdma_create_id: %w", syscall.Errno(rc))
		}
		return id.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new cm id: %w", err)
	}
	return id, nil
}

// adoptID wraps a cm_id librdmacm made for an incoming connection.
func (ec *EventChannel) adoptID(cid *C.struct_rdma_cm_id, ps PortSpace) (*CMID, error) {
	id := &CMID{ch: ec, id: cid, ps: ps}
	err := id.res.create(kindCMID, []*resource{&ec.res}, func() (func() error, error) {
		id.handle = cgo.NewHandle(id)
		C.rb_set_context(cid, C.uintptr_t(id.handle))
		return id.free, nil
	})
	if err != nil {
		C.rdma_reject(cid, nil, 0)
		C.rdma_destroy_id(cid)
		return nil, err
	}
	return id, nil
}

func (id *CMID) free() error {
	var err error
	if rc := C.rb_destroy_id(id.id); rc != 0 {
		err = fmt.Errorf("rdma_destroy_id: %w", syscall.Errno(rc))
	}
	id.handle.Delete()
	return err
}

// Close destroys the cm_id and, first, its QP. Disconnect first for an
// orderly close.
func (id *CMID) Close() error {
	if id == nil {
		return nil
	}
	return id.res.close()
}

func sockaddr(ap netip.AddrPort, ss *C.struct_sockaddr_storage) {
	a := ap.Addr()
	var scope uint32
	if z := a.Zone(); z != "" {
		if ifc, err := net.InterfaceByName(z); err == nil {
			scope = uint32(ifc.Index)
		}
	}
	if a.Is4() || a.Is4In6() {
		b := a.Unmap().As4()
		C.rb_sockaddr(ss, (*C.uint8_t)(&b[0]), 4, C.uint16_t(ap.Port()), 0)
		return
	}
	b := a.As16()
	C.rb_sockaddr(ss, (*C.uint8_t)(&b[0]), 16, C.uint16_t(ap.Port()), C.uint32_t(scope))
}

func msec(d time.Duration, def time.Duration) C.int {
	if d <= 0 {
		d = def
	}
	return C.int(d / time.Millisecond)
}

// ResolveAddr starts resolving dst (and binding to src, if valid) to an RDMA
// device; CMAddrResolved or CMAddrError follows on the channel.
func (id *CMID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	var s, d C.struct_sockaddr_storage
	hasSrc := C.int(0)
	if src.IsValid() {
		sockaddr(netip.AddrPortFrom(src, 0), &s)
		hasSrc = 1
	}
	sockaddr(dst, &d)
	if rc := C.rb_resolve_addr(id.id, &s, hasSrc, &d, msec(timeout, DefaultResolveTimeout)); rc != 0 {
		return fmt.Errorf("rdma_resolve_addr %s: %w", dst, syscall.Errno(rc))
	}
	return nil
}

// ResolveRoute starts resolving the route; CMRouteResolved or CMRouteError
// follows.
func (id *CMID) ResolveRoute(timeout time.Duration) error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	if rc := C.rb_resolve_route(id.id, msec(timeout, DefaultResolveTimeout)); rc != 0 {
		return fmt.Errorf("rdma_resolve_route: %w", syscall.Errno(rc))
	}
	return nil
}

// Bind binds the id to a local address (port 0: any).
func (id *CMID) Bind(addr netip.AddrPort) error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	var s C.struct_sockaddr_storage
	sockaddr(addr, &s)
	if rc := C.rb_bind_addr(id.id, &s); rc != 0 {
		return fmt.Errorf("rdma_bind_addr %s: %w", addr, syscall.Errno(rc))
	}
	return nil
}

// Listen makes a bound id accept connections: each arrives as a
// CMConnectRequest event with a new CMID.
func (id *CMID) Listen(backlog int) error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	if rc := C.rb_listen(id.id, C.int(backlog)); rc != 0 {
		return fmt.Errorf("rdma_listen: %w", syscall.Errno(rc))
	}
	return nil
}

// LocalAddr is the address the id is bound to.
func (id *CMID) LocalAddr() netip.AddrPort {
	return addrPort(&id.id.route.addr.anon0[0])
}

// RemoteAddr is the peer's address.
func (id *CMID) RemoteAddr() netip.AddrPort {
	return addrPort(&id.id.route.addr.anon1[0])
}

func addrPort(p *byte) netip.AddrPort {
	var ip [16]byte
	var port C.uint16_t
	switch C.rb_sockaddr_get((*C.struct_sockaddr)(unsafe.Pointer(p)), (*C.uint8_t)(&ip[0]), &port) {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[:4])), uint16(port))
	case 16:
		return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(port))
	}
	return netip.AddrPort{}
}

// Device is the RDMA device the id resolved or bound to: PDs and CQs for
// its QP come from it. It is shared by every id on that device and belongs to
// librdmacm; its Close frees only what was made from it.
func (id *CMID) Device() (*Device, error) {
	if err := id.res.acquire(); err != nil {
		return nil, err
	}
	defer id.res.op.RUnlock()
	if id.id.verbs == nil {
		return nil, fmt.Errorf("cm id device: address not resolved or bound to an RDMA device yet: %w", syscall.ENODEV)
	}
	return sharedDevice(id.id.verbs), nil
}

// Port is the device port the id uses (1-based; 0 before resolution).
func (id *CMID) Port() int { return int(id.id.port_num) }

// PathMTU is the MTU of the resolved route (on the passive side: the one the
// active side asked for); 0 when there is no route yet or on iWARP. The MTU
// the connection's QP uses is its Query().PathMTU: for an RC QP over the IB
// transport, at most this and at most both ends' active MTUs (cmmtu.go).
func (id *CMID) PathMTU() MTU { return MTU(C.rb_path_mtu(id.id)) }

// CreateQP creates the id's QP, in INIT; the connection moves it to RTR and
// RTS. pd must come from id.Device(). An RC QP over the IB transport
// (InfiniBand, RoCE) is moved by rbridge, which lowers its path MTU to the
// minimum of both ends' active MTUs (see cmmtu.go); otherwise (UD, iWARP)
// it is rdma_create_qp's, and rdma_cm moves it itself.
func (id *CMID) CreateQP(pd *PD, opts QPOptions) (*QP, error) {
	if id.ps == PortSpaceTCP && opts.Type == QPTypeRC && C.rb_cm_is_ib(id.id) != 0 {
		return id.createOwnQP(pd, opts)
	}
	q, err := newQP(pd, opts, &id.res, func(a *C.struct_ibv_qp_init_attr, h cgo.Handle) (*C.struct_ibv_qp, func() C.int, error) {
		if rc := C.rb_cm_create_qp(id.id, pd.pd, a, C.uintptr_t(h)); rc != 0 {
			return nil, nil, fmt.Errorf("rdma_create_qp: %w", syscall.Errno(rc))
		}
		return id.id.qp, func() C.int { return C.rb_destroy_qp(id.id) }, nil
	})
	if err != nil {
		return nil, err
	}
	id.qp = q
	return q, nil
}

func (id *CMID) createOwnQP(pd *PD, opts QPOptions) (*QP, error) {
	q, err := newQP(pd, opts, &id.res, func(a *C.struct_ibv_qp_init_attr, h cgo.Handle) (*C.struct_ibv_qp, func() C.int, error) {
		var cerr C.int
		qp := C.rb_cm_own_qp(pd.pd, a, C.uintptr_t(h), &cerr)
		if qp == nil {
			return nil, nil, fmt.Errorf("ibv_create_qp: %w", syscall.Errno(cerr))
		}
		return qp, func() C.int { return C.ibv_destroy_qp(qp) }, nil
	})
	if err != nil {
		return nil, err
	}
	if err := id.res.acquire(); err != nil {
		q.Close()
		return nil, err
	}
	defer id.res.op.RUnlock()
	if rc := C.rb_cm_qp_init(id.id, q.qp); rc != 0 {
		q.Close()
		return nil, fmt.Errorf("cm id qp %d to INIT (rdma_init_qp_attr, ibv_modify_qp): %w", q.qpn, syscall.Errno(rc))
	}
	id.qp, id.own, id.srq = q, true, opts.SRQ != nil
	return q, nil
}

// portMTU is the active MTU of the id's port and whether its link layer is
// InfiniBand; with id.res held.
func (id *CMID) portMTU() (MTU, bool, error) {
	var mtu, ll C.int
	if rc := C.rb_cm_port(id.id, &mtu, &ll); rc != 0 {
		return 0, false, fmt.Errorf("ibv_query_port %d: %w", id.id.port_num, syscall.Errno(rc))
	}
	return MTU(mtu), ll == C.IBV_LINK_LAYER_INFINIBAND, nil
}

// readyOwnQP moves own QP to RTR and RTS with the path MTU at most
// min(what rdma_cm gives, the local port's active MTU, the peer's trailer);
// with id.res held. On failure the QP is in ERR.
func (id *CMID) readyOwnQP(respRes, initDepth uint8) error {
	local, ibLink, err := id.portMTU()
	if err == nil {
		var mtu, step C.int
		link := C.int(0)
		if ibLink {
			link = 1
		}
		limit := capMTU(local, id.peerMTU)
		if rc := C.rb_cm_qp_rtr_rts(id.id, id.qp.qp, C.int(limit), C.int(respRes), C.int(initDepth), link, &mtu, &step); rc != 0 {
			what := [...]string{"", "INIT (ibv_modify_qp)", "RTR (rdma_init_qp_attr)", "RTR (ibv_modify_qp)", "RTS (rdma_init_qp_attr)", "RTS (ibv_modify_qp)"}[step]
			err = fmt.Errorf("cm id qp %d to %s: %w", id.qp.qpn, what, syscall.Errno(rc))
		} else {
			id.mtu = MTU(mtu)
			return nil
		}
	}
	id.qp.ToErr()
	return err
}

// QP is the id's QP, or nil.
func (id *CMID) QP() *QP { return id.qp }

// connParam fills c from p. The private data is copied to C memory (c
// points at it, and cgo forbids Go pointers inside memory passed to C);
// the caller frees it with the returned function. With own QP, c names it.
func (id *CMID) connParam(p *ConnParam, c *C.struct_rdma_conn_param) (free func()) {
	var pd unsafe.Pointer
	if len(p.PrivateData) > 0 {
		pd = C.CBytes(p.PrivateData)
	}
	var qpn uint32
	var srq uint8
	if id.own {
		qpn = id.qp.qpn
		if id.srq {
			srq = 1
		}
	}
	C.rb_conn_param(c, pd, C.int(len(p.PrivateData)), C.uint8_t(p.ResponderResources), C.uint8_t(p.InitiatorDepth),
		C.uint8_t(p.FlowControl), C.uint8_t(p.RetryCount), C.uint8_t(p.RNRRetryCount), C.uint32_t(qpn), C.uint8_t(srq))
	return func() { C.free(pd) }
}

// Connect starts connecting (after CMRouteResolved); CMEstablished,
// CMRejected, CMUnreachable or CMConnectError follows. With an RC QP over
// the IB transport, p.PrivateData has MaxConnectPrivateData bytes at most.
func (id *CMID) Connect(p ConnParam) error {
	if len(p.PrivateData) > 255 {
		return fmt.Errorf("rdma_connect: %d bytes of private data", len(p.PrivateData))
	}
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	if id.own && !p.NoMTUTrailer {
		// Tell the peer min(route MTU, our port's active MTU).
		local, _, err := id.portMTU()
		if err != nil {
			return fmt.Errorf("rdma_connect: %w", err)
		}
		if p.PrivateData, err = withMTUTrailer(p.PrivateData, cmREQPrivateData, capMTU(local, id.PathMTU())); err != nil {
			return fmt.Errorf("rdma_connect: %w", err)
		}
	}
	var c C.struct_rdma_conn_param
	defer id.connParam(&p, &c)()
	if rc := C.rb_connect(id.id, &c); rc != 0 {
		return fmt.Errorf("rdma_connect: %w", syscall.Errno(rc))
	}
	return nil
}

// Accept accepts an incoming connection (the ID of a CMConnectRequest
// event); CMEstablished follows. With an RC QP over the IB transport, the QP
// is in RTS when Accept returns, p.PrivateData has MaxAcceptPrivateData
// bytes at most, and p.ResponderResources and p.InitiatorDepth set the QP's
// max_dest_rd_atomic and max_rd_atomic (255: what rdma_cm gives), as
// librdmacm does.
func (id *CMID) Accept(p ConnParam) error {
	if len(p.PrivateData) > 255 {
		return fmt.Errorf("rdma_accept: %d bytes of private data", len(p.PrivateData))
	}
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	if id.own {
		if limit := MaxAcceptPrivateData; len(p.PrivateData) > limit && !p.NoMTUTrailer || len(p.PrivateData) > cmREPPrivateData {
			return fmt.Errorf("rdma_accept: %d bytes of private data, at most %d", len(p.PrivateData), limit)
		}
		if err := id.readyOwnQP(p.ResponderResources, p.InitiatorDepth); err != nil {
			return fmt.Errorf("rdma_accept: %w", err)
		}
		// Tell the active end the MTU applied.
		if !p.NoMTUTrailer {
			p.PrivateData, _ = withMTUTrailer(p.PrivateData, cmREPPrivateData, id.mtu)
		}
	}
	var c C.struct_rdma_conn_param
	defer id.connParam(&p, &c)()
	if rc := C.rb_accept(id.id, &c); rc != 0 {
		if id.own {
			id.qp.ToErr()
		}
		return fmt.Errorf("rdma_accept: %w", syscall.Errno(rc))
	}
	return nil
}

// Reject refuses an incoming connection, with private data for the peer.
// The id is still to be closed.
func (id *CMID) Reject(privateData []byte) error {
	if len(privateData) > 255 {
		return fmt.Errorf("rdma_reject: %d bytes of private data", len(privateData))
	}
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	var pd unsafe.Pointer
	if len(privateData) > 0 {
		pd = unsafe.Pointer(&privateData[0])
	}
	if rc := C.rb_reject(id.id, pd, C.int(len(privateData))); rc != 0 {
		return fmt.Errorf("rdma_reject: %w", syscall.Errno(rc))
	}
	return nil
}

// Disconnect starts an orderly disconnect; both sides see CMDisconnected,
// and the QP moves to ERR (outstanding work flushes).
func (id *CMID) Disconnect() error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	if id.own {
		// As librdmacm does for its own QPs on the IB transport.
		id.qp.ToErr()
	}
	if rc := C.rb_disconnect(id.id); rc != 0 {
		return fmt.Errorf("rdma_disconnect: %w", syscall.Errno(rc))
	}
	return nil
}

// Next waits for the channel's next event, copies it out and acknowledges
// it. For CMConnectRequest the event's ID is a new CMID (on this channel) to
// Accept or Reject, and Close. For an id whose RC QP rbridge moves (IB
// transport, see CreateQP), the REP arrives as CMConnectResponse, and Next
// moves the QP to RTR and RTS, completes the connection (rdma_establish) and
// returns CMEstablished; or, if that fails, CMConnectError with a negative
// errno as Status (the peer is rejected and the QP is in ERR).
func (ec *EventChannel) Next(ctx context.Context) (CMEvent, error) {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	ev, newID, peerMTU, err := ec.next(ctx)
	if err != nil {
		return ev, err
	}
	if ev.Type == CMConnectResponse && ev.ID != nil && ev.ID.own {
		return ev.ID.establish(ev), nil
	}
	if newID == nil {
		return ev, nil
	}
	// Made outside the channel's operation lock: creating takes the tree
	// lock, which a concurrent Close holds while it waits for that lock.
	ps := PortSpaceTCP
	if ev.ListenID != nil {
		ps = ev.ListenID.ps
	}
	if ev.ID, err = ec.adoptID(newID, ps); err != nil {
		return CMEvent{}, fmt.Errorf("rdma_cm connect request: %w", err)
	}
	ev.ID.peerMTU = peerMTU
	return ev, nil
}

// establish completes an active connection whose QP is rbridge's, on its
// CMConnectResponse event ev.
func (id *CMID) establish(ev CMEvent) CMEvent {
	err := id.res.acquire()
	if err == nil {
		defer id.res.op.RUnlock()
		if err = id.readyOwnQP(RDMAMaxRespRes, RDMAMaxInitDepth); err == nil {
			if rc := C.rb_establish(id.id); rc != 0 {
				id.qp.ToErr()
				err = fmt.Errorf("rdma_establish: %w", syscall.Errno(rc))
			}
		}
		if err != nil {
			C.rdma_reject(id.id, nil, 0)
		}
	}
	if err != nil {
		ev.Type, ev.Status = CMConnectError, -int(syscall.EINVAL)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			ev.Status = -int(errno)
		}
		ev.Err = err
		return ev
	}
	ev.Type = CMEstablished
	return ev
}

func (ec *EventChannel) next(ctx context.Context) (ev CMEvent, newID *C.struct_rdma_cm_id, peerMTU MTU, err error) {
	if err := ec.res.acquire(); err != nil {
		return CMEvent{}, nil, 0, err
	}
	defer ec.res.op.RUnlock()
	var e *C.struct_rdma_cm_event
	var rc C.int
	err = waitRead(ctx, ec.file, func() bool {
		rc = C.rb_get_cm_event(ec.ch, &e)
		return syscall.Errno(rc) != syscall.EAGAIN
	})
	if err != nil {
		return CMEvent{}, nil, 0, fmt.Errorf("rdma_cm event: %w", err)
	}
	if rc != 0 {
		return CMEvent{}, nil, 0, fmt.Errorf("rdma_get_cm_event: %w", syscall.Errno(rc))
	}
	defer C.rdma_ack_cm_event(e)
	ev = CMEvent{Type: CMEventType(e.event), Status: int(e.status)}
	if ev.Type == CMConnectRequest {
		newID = e.id
		ev.ListenID = idOf(e.listen_id)
	} else {
		ev.ID = idOf(e.id)
	}
	// conn and ud params both begin with private_data, private_data_len;
	// a multicast event's private_data is the join's context (rbridge
	// passes none), not data.
	conn := (*C.struct_rdma_conn_param)(unsafe.Pointer(&e.param))
	mcast := ev.Type == CMMulticastJoin || ev.Type == CMMulticastError
	if !mcast && conn.private_data != nil && conn.private_data_len > 0 {
		ev.Param.PrivateData = C.GoBytes(conn.private_data, C.int(conn.private_data_len))
	}
	psUDP := mcast || (ev.ID != nil && ev.ID.ps.datagram()) || (ev.ListenID != nil && ev.ListenID.ps.datagram())
	if psUDP {
		ud := (*C.struct_rdma_ud_param)(unsafe.Pointer(&e.param))
		ev.QPN, ev.QKey = uint32(ud.qp_num), uint32(ud.qkey)
		if ev.Type == CMEstablished || ev.Type == CMMulticastJoin {
			ev.AH = ahAttrFromC(&ud.ah_attr)
		}
	} else {
		ev.Param.ResponderResources = uint8(conn.responder_resources)
		ev.Param.InitiatorDepth = uint8(conn.initiator_depth)
		ev.Param.FlowControl = uint8(conn.flow_control)
		ev.Param.RetryCount = uint8(conn.retry_count)
		ev.Param.RNRRetryCount = uint8(conn.rnr_retry_count)
		// The peer's MTU trailer (cmmtu.go), on RC over the IB transport.
		switch {
		case ev.Type == CMConnectRequest && C.rb_cm_is_ib(e.id) != 0:
			ev.Param.PrivateData, peerMTU = splitMTUTrailer(ev.Param.PrivateData)
		case ev.Type == CMConnectResponse && ev.ID != nil && ev.ID.own:
			ev.Param.PrivateData, ev.ID.peerMTU = splitMTUTrailer(ev.Param.PrivateData)
		}
	}
	return ev, newID, peerMTU, nil
}

func idOf(cid *C.struct_rdma_cm_id) *CMID {
	if cid == nil {
		return nil
	}
	if h := C.rb_context(cid); h != 0 {
		id, _ := cgo.Handle(h).Value().(*CMID)
		return id
	}
	return nil
}

// Expect waits for the next event and checks that it is want with status 0;
// otherwise it returns the event with an error naming what came instead.
func (ec *EventChannel) Expect(ctx context.Context, want CMEventType) (CMEvent, error) {
	ev, err := ec.Next(ctx)
	if err != nil {
		return ev, err
	}
	if ev.Type != want || ev.Status != 0 {
		return ev, &CMEventError{Want: want, Got: ev.Type, Status: ev.Status}
	}
	return ev, nil
}
