//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static int rb_join_multicast(struct rdma_cm_id *id, struct sockaddr_storage *a, int send_only) {
	struct rdma_cm_join_mc_attr_ex attr;
	memset(&attr, 0, sizeof(attr));
	attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	attr.join_flags = send_only ? RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER : RDMA_MC_JOIN_FLAG_FULLMEMBER;
	attr.addr = (struct sockaddr *)a;
	return rdma_join_multicast_ex(id, &attr, NULL) ? errno : 0;
}
static int rb_leave_multicast(struct rdma_cm_id *id, struct sockaddr_storage *a) {
	return rdma_leave_multicast(id, (struct sockaddr *)a) ? errno : 0;
}
*/
import "C"

import (
	"fmt"
	"net/netip"
	"syscall"
)

// JoinMulticast joins the id to the IP multicast group (rdma_join_multicast_ex,
// a full member unless opts.SendOnly). The id is in the UDP port space
// with its address resolved (ResolveAddr to the group, or to any address
// of the device) or bound; CMMulticastJoin follows with the group's
// address vector (CMEvent.AH: the MGID as its DGID), MulticastQPN and the
// group's Q_Key, or CMMulticastError. Create the id's UD QP (CreateQP)
// before joining: librdmacm attaches it to the group when the join
// completes, and detaches it on LeaveMulticast. On RoCE the MGID of an
// IPv4 group is the IPv4-mapped address (package roce/mcast), a full join
// sends an IGMP report on the netdev and a send-only one does not; Linux
// 6.1 refuses IPv6 groups on RoCEv2 (ENOTSUPP).
func (id *CMID) JoinMulticast(group netip.Addr, opts JoinOptions) error {
	if !group.Unmap().IsMulticast() {
		return fmt.Errorf("rdma_join_multicast %v: not a multicast group: %w", group, syscall.EINVAL)
	}
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	var a C.struct_sockaddr_storage
	sockaddr(netip.AddrPortFrom(group, 0), &a)
	sendOnly := C.int(0)
	if opts.SendOnly {
		sendOnly = 1
	}
	if rc := C.rb_join_multicast(id.id, &a, sendOnly); rc != 0 {
		return fmt.Errorf("rdma_join_multicast %v: %w", group, syscall.Errno(rc))
	}
	return nil
}

// LeaveMulticast leaves a group the id joined (rdma_leave_multicast): its
// QP is detached and the kernel leaves the group (IGMP on RoCE). Closing
// the id leaves every group it joined.
func (id *CMID) LeaveMulticast(group netip.Addr) error {
	if err := id.res.acquire(); err != nil {
		return err
	}
	defer id.res.op.RUnlock()
	var a C.struct_sockaddr_storage
	sockaddr(netip.AddrPortFrom(group, 0), &a)
	if rc := C.rb_leave_multicast(id.id, &a); rc != 0 {
		return fmt.Errorf("rdma_leave_multicast %v: %w", group, syscall.Errno(rc))
	}
	return nil
}
