// Package guest tells a test whether it runs inside rbridge's integration
// guest (a qemu VM with the kernel's rxe and siw devices, started by
// `make integration`) and which devices, addresses and network namespace the
// current run uses.
//
// A test opts in by calling [Device] (or [RequireKind], [UserNetns]). On the
// host, where there is no RDMA, these skip the test with a reason that names
// `make integration`. In the guest they never skip for a missing device: a
// device the harness promised but that is absent fails the test.
//
// The runner builds every package whose tests import this package with
// `go test -c` and runs the binary in the guest once per device pass: first
// the rxe pass (rxe0 with peer rxe1), then the siw pass (siw0 with peer
// siw1). The pass is described by these environment variables:
//
//	RBRIDGE_GUEST=1                  set only inside the guest
//	RBRIDGE_DEVICE=rxe0              the RDMA device under test (siw0 in the siw pass)
//	RBRIDGE_DEVICE_KIND=rxe          rxe or siw
//	RBRIDGE_NETDEV=veth0             its netdev (veth2 in the siw pass)
//	RBRIDGE_IP=198.18.1.1            its IPv4 address (198.18.2.1)
//	RBRIDGE_PEER_DEVICE=rxe1         the device at the other end of the wire (siw1)
//	RBRIDGE_PEER_NETDEV=br1          its netdev (veth3)
//	RBRIDGE_PEER_IP=198.18.1.2       its IPv4 address (198.18.2.2)
//	RBRIDGE_PREFIX_LEN=24            prefix length of both addresses
//	RBRIDGE_USER_NETNS=user0         network namespace for a userspace RoCEv2 endpoint
//	RBRIDGE_USER_NETDEV=vuser1       its netdev, inside that namespace
//	RBRIDGE_USER_IP=198.18.1.3       its IPv4 address
//	RBRIDGE_USER_PEER_DEVICE=rxe1    the kernel rxe device on the same L2 segment
//	RBRIDGE_USER_PEER_NETDEV=br1     that device's netdev (in the initial namespace)
//	RBRIDGE_USER_PEER_IP=198.18.1.2  that device's IPv4 address
//	RBRIDGE_IB_GATEWAY_DEVICE=rxe2   the IB fabric's gateway device (see [IB])
//	RBRIDGE_IB_GATEWAY_NETDEV=veth4  its netdev
//	RBRIDGE_IB_GATEWAY_IP=198.18.3.1 its IPv4 address
//	RBRIDGE_IB_PEER_DEVICE=rxe3      the IB fabric's application device
//	RBRIDGE_IB_PEER_NETDEV=veth5     its netdev
//	RBRIDGE_IB_PEER_IP=198.18.3.2    its IPv4 address
//	RBRIDGE_BINARY=/tests/bin/rbridge the rbridge command built from this tree (see [Rbridge])
//	RBRIDGE_ARTIFACTS=/tmp/artifacts/<id>.<device> where a test leaves files for the host (see [Artifact])
//
// The user namespace variables are the same in both passes: a userspace
// RoCEv2 endpoint talks to kernel rxe, whichever device the pass is about.
// Kernel rxe owns UDP port 4791 in the initial namespace, which is why the
// userspace endpoint lives in its own namespace; rxe0 reaches it too, through
// the wire to br1.
//
// Topology in the guest (initial namespace unless said otherwise):
//
//	rxe0 on veth0 198.18.1.1 ==wire== veth1 -+- br1 198.18.1.2: rxe1
//	                              vuser0 ----+
//	                                |wire
//	netns user0:                 vuser1 198.18.1.3
//
//	siw0 on veth2 198.18.2.1 ==wire== veth3 198.18.2.2: siw1
//
//	rxe2 on veth4 198.18.3.1 ==wire== veth5 198.18.3.2: rxe3   (the IB fabric)
//
// Only traffic from 198.18.3.0/24 reaches the IB fabric over its wire;
// the rest of the guest cannot reach it except through a gateway.
//
// Traffic between two local addresses crosses the veth wire, never lo (see
// integration/vm/init.sh for the routing that forces it).
package guest
