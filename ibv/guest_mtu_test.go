package ibv_test

import (
	"bytes"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// setNetdevMTU sets a netdev's MTU for the test and puts it back after.
func setNetdevMTU(t *testing.T, netdev string, mtu int) {
	t.Helper()
	ifc, err := net.InterfaceByName(netdev)
	check(t, err)
	ip := func(m int) error {
		out, err := exec.Command("ip", "link", "set", "dev", netdev, "mtu", strconv.Itoa(m)).CombinedOutput()
		if err != nil {
			return &exec.Error{Name: "ip link set dev " + netdev + " mtu " + strconv.Itoa(m) + ": " + string(bytes.TrimSpace(out)), Err: err}
		}
		return nil
	}
	check(t, ip(mtu))
	old := ifc.MTU
	t.Cleanup(func() {
		if err := ip(old); err != nil {
			t.Error(err)
		}
	})
}

// activeMTU waits (rxe follows its netdev's MTU changes) until the device's
// port 1 has the active MTU want, and returns what it has at the deadline.
func activeMTU(t *testing.T, name string, want ibv.MTU) ibv.MTU {
	t.Helper()
	dev, err := ibv.OpenDevice(name)
	check(t, err)
	defer dev.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		p, err := dev.QueryPort(1)
		check(t, err)
		if p.ActiveMTU == want || time.Now().After(deadline) {
			return p.ActiveMTU
		}
	}
}

// Path MTU over rdma_cm: both QPs of a connection end with the minimum of
// the two ports' active MTUs, whichever end has the larger one, and messages
// larger than the MTU cross both ways. rxe0's netdev goes to MTU 9000
// (active MTU 4096) while rxe1's stays at 1500 (1024). With rdma_cm moving
// the QPs itself, both took the active end's route MTU (4096 when rxe0
// connects) and a 16 KiB WRITE never completed: its 4 KiB packets do not
// fit rxe1's link.
func TestGuestPathMTU(t *testing.T) {
	d := guest.RequireKind(t, "rxe")
	setNetdevMTU(t, d.Netdev, 9000)
	big, small := activeMTU(t, d.Name, ibv.MTU4096), activeMTU(t, d.Peer, ibv.MTU1024)
	if big != ibv.MTU4096 || small != ibv.MTU1024 {
		t.Fatalf("active MTUs: %s %v (netdev %s at 9000), %s %v, want 4096 and 1024", d.Name, big, d.Netdev, d.Peer, small)
	}
	t.Logf("active MTUs: %s %v, %s %v", d.Name, big, d.Peer, small)
	swapped := guest.Dev{Name: d.Peer, Kind: d.Kind, Port: d.Port, Netdev: d.PeerNetdev, IP: d.PeerIP,
		Peer: d.Name, PeerNetdev: d.Netdev, PeerIP: d.IP, PrefixLen: d.PrefixLen}
	for _, c := range []struct {
		name string
		dev  guest.Dev
	}{{"larger-end-connects", d}, {"larger-end-accepts", swapped}} {
		t.Run(c.name, func(t *testing.T) {
			cli, srv, cliGot, srvGot := connectRC(t, c.dev, connectOptions{})
			// The MTU trailers were found and taken off what the
			// caller sees.
			if len(srvGot) != ibv.MaxConnectPrivateData || len(cliGot) != ibv.MaxAcceptPrivateData {
				t.Errorf("private data: server got %d bytes, client %d, want %d and %d", len(srvGot), len(cliGot), ibv.MaxConnectPrivateData, ibv.MaxAcceptPrivateData)
			}
			ca, err := cli.qp.Query()
			check(t, err)
			sa, err := srv.qp.Query()
			check(t, err)
			t.Logf("client on %s: QP path MTU %v (route %v); server on %s: QP path MTU %v (REQ %v)",
				c.dev.Name, ca.PathMTU, cli.id.PathMTU(), c.dev.Peer, sa.PathMTU, srv.id.PathMTU())
			if ca.PathMTU != ibv.MTU1024 || sa.PathMTU != ibv.MTU1024 {
				t.Fatalf("QP path MTUs: client %v, server %v, want both %v", ca.PathMTU, sa.PathMTU, ibv.MTU1024)
			}
			if ca.State != ibv.QPStateRTS || sa.State != ibv.QPStateRTS {
				t.Errorf("QP states: client %v, server %v", ca.State, sa.State)
			}
			// 16 KiB (16 packets) each way: WRITE from the client,
			// WRITE from the server, READ by the client.
			sr, cr := parseRemote(t, cliGot), parseRemote(t, srvGot)
			const n, src, dst = 16 << 10, 16 << 10, 32 << 10
			cb, sb := cli.mr.Bytes(), srv.mr.Bytes()
			fill(cb[src:src+n], 11)
			fill(sb[src:src+n], 22)
			send(t, cli.qp, ibv.SendWR{ID: 1, Op: ibv.OpWrite, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(cli.mr, src, n)}, RemoteAddr: sr.Addr + dst, RKey: sr.RKey})
			send(t, srv.qp, ibv.SendWR{ID: 2, Op: ibv.OpWrite, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(srv.mr, src, n)}, RemoteAddr: cr.Addr + dst, RKey: cr.RKey})
			waitOK(t, cli.cq, 1)
			waitOK(t, srv.cq, 1)
			if !bytes.Equal(sb[dst:dst+n], cb[src:src+n]) || !bytes.Equal(cb[dst:dst+n], sb[src:src+n]) {
				t.Fatalf("16 KiB WRITEs: data differs")
			}
			fill(sb[dst:dst+n], 33)
			send(t, cli.qp, ibv.SendWR{ID: 3, Op: ibv.OpRead, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(cli.mr, src, n)}, RemoteAddr: sr.Addr + dst, RKey: sr.RKey})
			waitOK(t, cli.cq, 1)
			if !bytes.Equal(cb[src:src+n], sb[dst:dst+n]) {
				t.Fatalf("16 KiB READ: data differs")
			}
		})
	}
}
