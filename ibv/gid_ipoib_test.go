package ibv_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// ibTable is a dual-port InfiniBand HCA (mlx4_0, port GUIDs ...e1b1 and
// ...e1b2; port 1 with a second GID at index 1) beside a RoCE device whose
// netdev holds 10.20.0.1.
func ibTable() []ibv.GIDEntry {
	t := []ibv.GIDEntry{
		{Device: "mlx4_0", Port: 1, Index: 0, GID: gid("fe80::f452:1403:7b:e1b1"), Type: ibv.GIDTypeIB},
		{Device: "mlx4_0", Port: 1, Index: 1, GID: gid("fec0::f452:1403:7b:e1b1"), Type: ibv.GIDTypeIB},
		{Device: "mlx4_0", Port: 2, Index: 0, GID: gid("fe80::f452:1403:7b:e1b2"), Type: ibv.GIDTypeIB},
	}
	return append(t, roceTable("mlx5_0", "eth0", "fe80::1", "10.20.0.1")...)
}

// TestChooseGIDIPoIB: an IP on an IPoIB netdev chooses GID index 0 of the
// netdev's port (no GID holds the IP there); a device, port or netdev the
// query names must be that one; a port not known, or without GID 0, is a
// clear error; the override still works, on the netdev's port; and none of
// it speaks of RoCEv2 or matches ErrNoGID.
func TestChooseGIDIPoIB(t *testing.T) {
	ip := netip.MustParseAddr("10.10.0.1")
	ib0 := &ibv.IPoIBPort{Netdev: "ib0", Device: "mlx4_0", Port: 1}
	ib1 := &ibv.IPoIBPort{Netdev: "ib1", Device: "mlx4_0", Port: 2}
	for _, tc := range []struct {
		name      string
		q         ibv.GIDQuery
		wantPort  int
		wantIndex int
		wantGID   string
		wantErr   error
		reason    string // the whole reason, or a substring of the error
	}{
		{name: "port 1", q: ibv.GIDQuery{IP: ip, IPoIB: ib0}, wantPort: 1, wantIndex: 0, wantGID: "fe80::f452:1403:7b:e1b1",
			reason: "IPoIB netdev ib0 on mlx4_0 port 1: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "port 2", q: ibv.GIDQuery{IP: ip, IPoIB: ib1}, wantPort: 2, wantIndex: 0, wantGID: "fe80::f452:1403:7b:e1b2",
			reason: "IPoIB netdev ib1 on mlx4_0 port 2: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "device and port named", q: ibv.GIDQuery{IP: ip, Device: "mlx4_0", Port: 2, IPoIB: ib1}, wantPort: 2, wantIndex: 0, wantGID: "fe80::f452:1403:7b:e1b2",
			reason: "IPoIB netdev ib1 on mlx4_0 port 2: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "netdev named", q: ibv.GIDQuery{IP: ip, Netdev: "ib0", IPoIB: ib0}, wantPort: 1, wantIndex: 0, wantGID: "fe80::f452:1403:7b:e1b1",
			reason: "IPoIB netdev ib0 on mlx4_0 port 1: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "another device named", q: ibv.GIDQuery{IP: ip, Device: "mlx5_0", IPoIB: ib0}, wantErr: ibv.ErrWrongPort,
			reason: "choose gid for 10.10.0.1 on device mlx5_0: 10.10.0.1 is on IPoIB netdev ib0 on mlx4_0 port 1; name that device and port, or leave them out"},
		{name: "another port named", q: ibv.GIDQuery{IP: ip, Device: "mlx4_0", Port: 2, IPoIB: ib0}, wantErr: ibv.ErrWrongPort,
			reason: "choose gid for 10.10.0.1 on device mlx4_0 port 2: 10.10.0.1 is on IPoIB netdev ib0 on mlx4_0 port 1"},
		{name: "another netdev named", q: ibv.GIDQuery{IP: ip, Netdev: "ib1", IPoIB: ib0}, wantErr: ibv.ErrWrongPort,
			reason: "on netdev ib1: 10.10.0.1 is on IPoIB netdev ib0 on mlx4_0 port 1"},
		{name: "port unknown", q: ibv.GIDQuery{IP: ip, IPoIB: &ibv.IPoIBPort{Netdev: "ib0", Unknown: "no RDMA device: read /sys/class/net/ib0/device/infiniband: file does not exist"}},
			wantErr: ibv.ErrNoIPoIBGID, reason: "choose gid for 10.10.0.1: it is on IPoIB netdev ib0, whose RDMA device and port are unknown (no RDMA device: read /sys/class/net/ib0/device/infiniband: file does not exist)"},
		{name: "no GID 0", q: ibv.GIDQuery{IP: ip, IPoIB: &ibv.IPoIBPort{Netdev: "ib2", Device: "mlx4_0", Port: 3}}, wantErr: ibv.ErrNoIPoIBGID,
			reason: "it is on IPoIB netdev ib2 on mlx4_0 port 3, which has no valid GID at index 0"},
		{name: "override", q: ibv.GIDQuery{IP: ip, IPoIB: ib0, UseIndex: true, Index: 1}, wantPort: 1, wantIndex: 1, wantGID: "fec0::f452:1403:7b:e1b1",
			reason: "explicit override: index 1 (warning: not index 0, the GID ib0's hardware address carries, which rdma_cm uses)"},
		{name: "override index 0", q: ibv.GIDQuery{IP: ip, IPoIB: ib1, UseIndex: true, Index: 0}, wantPort: 2, wantIndex: 0, wantGID: "fe80::f452:1403:7b:e1b2",
			reason: "explicit override: index 0"},
		{name: "override on another port", q: ibv.GIDQuery{IP: ip, IPoIB: ib0, Port: 2, UseIndex: true, Index: 0}, wantErr: ibv.ErrWrongPort,
			reason: "is on IPoIB netdev ib0 on mlx4_0 port 1"},
		{name: "override missing", q: ibv.GIDQuery{IP: ip, IPoIB: ib1, UseIndex: true, Index: 1}, wantErr: ibv.ErrNoIPoIBGID,
			reason: "choose gid for 10.10.0.1: override index 1: no such valid entry on IPoIB netdev ib1 on mlx4_0 port 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ibv.ChooseGID(ibTable(), tc.q)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ChooseGID: error %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("ChooseGID error\n%v\ndoes not say\n%s", err, tc.reason)
				}
				if errors.Is(err, ibv.ErrNoGID) || strings.Contains(err.Error(), "RoCEv2") {
					t.Errorf("ChooseGID error %q matches ErrNoGID or speaks of RoCEv2 for an address on IPoIB", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ChooseGID: %v", err)
			}
			if got.Device != "mlx4_0" || got.Port != tc.wantPort || got.Index != tc.wantIndex || got.GID != gid(tc.wantGID) || got.Type != ibv.GIDTypeIB {
				t.Errorf("ChooseGID chose %v, want mlx4_0 port %d index %d IB %s", got.GIDEntry, tc.wantPort, tc.wantIndex, tc.wantGID)
			}
			if got.Reason != tc.reason {
				t.Errorf("ChooseGID reason\n%q\nwant\n%q", got.Reason, tc.reason)
			}
			if got.IPoIB != tc.q.IPoIB.Netdev || got.Override != tc.q.UseIndex {
				t.Errorf("ChooseGID IPoIB %q Override %v, want %q %v", got.IPoIB, got.Override, tc.q.IPoIB.Netdev, tc.q.UseIndex)
			}
		})
	}
}

// TestChooseGIDRoCEBesideIPoIB: on a host with an InfiniBand HCA too, a
// RoCE address (no IPoIB port given) keeps choosing its RoCEv2 GID, and an
// address on no netdev of the table still fails as before.
func TestChooseGIDRoCEBesideIPoIB(t *testing.T) {
	got, err := ibv.ChooseGID(ibTable(), ibv.GIDQuery{IP: netip.MustParseAddr("10.20.0.1")})
	if err != nil || got.Device != "mlx5_0" || got.Index != 3 || got.Type != ibv.GIDTypeRoCEv2 || got.IPoIB != "" {
		t.Errorf("ChooseGID(10.20.0.1) = %v %q, %v; want mlx5_0 port 1 index 3 RoCEv2", got.GIDEntry, got.IPoIB, err)
	}
	if _, err := ibv.ChooseGID(ibTable(), ibv.GIDQuery{IP: netip.MustParseAddr("10.10.0.1")}); !errors.Is(err, ibv.ErrNoGID) {
		t.Errorf("ChooseGID(10.10.0.1) without its IPoIB port: %v, want ErrNoGID", err)
	}
}
