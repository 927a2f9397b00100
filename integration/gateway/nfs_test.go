package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
)

// NFS over RDMA (RPC-over-RDMA version 1): the kernel's nfsd on the RoCE
// side (rxe1), a client on the IB fabric (rxe3) mounting it through
// rbridge run. The server is the one-sided initiator: it READs the data of
// a WRITE from the client's memory (read chunks) and WRITEs a READ's data
// and long replies into it (write chunks, reply chunks), and answers with
// Send With Invalidate when the client's connection private data (RFC
// 8797) says it may.

// nfsExport is the directory nfsServer exports: a client's mount of "/".
const nfsExport = "/srv/nfs"

// nfsServer exports a tmpfs over RDMA on port 20049 (every address:
// nfsd's RDMA listener binds the wildcard) until the test ends.
func nfsServer(t testing.TB) {
	t.Helper()
	for _, m := range []string{"nfsd", "rpcrdma", "nfsv4"} {
		if out, err := exec.Command("/usr/sbin/modprobe", m).CombinedOutput(); err != nil {
			t.Fatalf("modprobe %s: %v\n%s", m, err, out)
		}
	}
	if _, err := os.Stat("/proc/fs/nfsd/threads"); err != nil {
		if err := unix.Mount("nfsd", "/proc/fs/nfsd", "nfsd", 0, ""); err != nil {
			t.Fatalf("mount nfsd: %v", err)
		}
	}
	export := nfsExport
	for _, d := range []string{export, "/var/lib/nfs/v4recovery", "/etc"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", export, "tmpfs", 0, "size=96m"); err != nil {
		t.Fatalf("mount the export's tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(export, unix.MNT_DETACH) })
	if err := os.WriteFile("/etc/exports", []byte(export+" *(rw,fsid=0,no_root_squash,insecure,no_subtree_check,sync)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/sbin/exportfs", "-ra").CombinedOutput(); err != nil {
		t.Fatalf("exportfs -ra: %v\n%s", err, out)
	}
	var mlog syncBuffer
	mountd := exec.Command("/usr/sbin/rpc.mountd", "-F", "-N", "2", "-N", "3")
	mountd.Stdout, mountd.Stderr = &mlog, &mlog
	if err := mountd.Start(); err != nil {
		t.Fatalf("rpc.mountd: %v", err)
	}
	t.Cleanup(func() {
		_ = mountd.Process.Kill()
		_ = mountd.Wait()
		if t.Failed() {
			t.Logf("rpc.mountd:\n%s", mlog.String())
		}
	})
	write := func(name, v string) {
		t.Helper()
		// nfsd's files take a line: one without its newline is refused.
		if err := os.WriteFile("/proc/fs/nfsd/"+name, []byte(v+"\n"), 0o644); err != nil {
			t.Fatalf("nfsd: write %q to %s: %v\n%s", v, name, err, dmesg("nfs"))
		}
	}
	// Owners as numbers, as the client sends them: no idmapd here.
	if err := os.WriteFile("/sys/module/nfsd/parameters/nfs4_disable_idmapping", []byte("Y\n"), 0o644); err != nil {
		t.Fatalf("nfsd: numeric owners: %v", err)
	}
	write("versions", "-3 +4 +4.1 +4.2")
	write("nfsv4leasetime", "10")
	write("nfsv4gracetime", "10")
	write("portlist", "rdma 20049")
	write("threads", "4")
	t.Cleanup(func() { _ = os.WriteFile("/proc/fs/nfsd/threads", []byte("0\n"), 0o644) })
}

// nfsMount mounts server:/ at dir over RDMA to port, from the IB fabric's
// peer address, until unmounted (or the test ends). xprtrdma resolves its
// route without a source address: a rule sends the guest's own traffic to
// the gateway's address out of the IB fabric's peer side for the test.
func nfsMount(t testing.TB, server, client, dir string, port int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("vers=4.2,proto=rdma,port=%d,addr=%s,clientaddr=%s,soft,timeo=150,retrans=2", port, server, client)
	within(t, 2*time.Minute, "mount "+server+":/ ("+opts+")", func() error {
		return unix.Mount(server+":/", dir, "nfs4", 0, opts)
	})
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// routeFromIB makes the guest's unbound traffic to gw leave from the IB
// fabric's peer side (rxe3), as a host on the IB island would, for the
// test: a kernel initiator that binds no source address (ib_iser) or
// picks one by route reaches the gateway's IB address over the fabric's
// wire.
func routeFromIB(t *testing.T, gw string) {
	t.Helper()
	add := []string{"rule", "add", "pref", "99", "iif", "lo", "to", gw + "/32", "lookup", "103"}
	if out, err := exec.Command("/usr/sbin/ip", add...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", add, err, out)
	}
	t.Cleanup(func() {
		add[1] = "del"
		_ = exec.Command("/usr/sbin/ip", add...).Run()
	})
}

// nfsTree is how many small files nfsWork writes: each a few RPCs, so the
// tree is what costs time under TCG.
const nfsTree = 120

// nfsWork writes a 16 MiB file and a tree of nfsTree files of 0 to 70 KiB
// under dir, each with random bytes, and returns what it wrote.
func nfsWork(dir string, seed uint64) (map[string][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 9))
	files := map[string][]byte{}
	big := make([]byte, 16<<20)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	files["big"] = big
	for i := range nfsTree {
		b := make([]byte, rng.IntN(70<<10))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		files[fmt.Sprintf("tree/d%d/f%03d", i%10, i)] = b
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// nfsCompare reads every file back from dir and compares it.
func nfsCompare(dir string, files map[string][]byte) error {
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s: read back %d bytes, differing from the %d written", name, len(got), len(want))
		}
	}
	n := 0
	err := filepath.Walk(filepath.Join(dir, "tree"), func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		return err
	}
	if n != nfsTree {
		return fmt.Errorf("the tree holds %d files, want %d", n, nfsTree)
	}
	return nil
}

// within runs f under a deadline: NFS I/O stuck in the kernel leaves its
// thread in uninterruptible sleep.
func within(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, dmesg("rdma")+"\n"+dmesg("nfs"))
		}
	case <-ctx.Done():
		t.Fatalf("%s did not end within %v\n%s", what, d, dmesg("rdma")+"\n"+dmesg("nfs"))
	}
}

// TestGuestRunNFSFromIB: a client on the IB fabric mounts nfsd on the
// RoCE side through rbridge run, writes a 16 MiB file and a tree of
// nfsTree files, unmounts, mounts again and reads every byte back. The verbs leg
// keeps 128 receives of 4 KiB posted per connection: nfsd grants its
// client 64 credits, and RPC-over-RDMA never expects an RNR NAK (with 16,
// the default, the client's calls met them, rxe's retry re-executed a
// fast registration, "rxe_reg_fast_mr: ... not free", and the client
// reconnected every 15 s). The route
// listens on 20050: nfsd's RDMA listener holds 20049 on every address of
// this one kernel, the gateway's among them. Over AF_XDP the route says
// protocol: nfs, without the leg's receives: the protocol keeps them, and
// parses and counts every message (the server is behind the userspace
// leg: nothing is staged). Then with verbs legs on both sides, where the
// server's READs and WRITEs reach the gateway's RoCE HCA (rxe0) and are
// staged (nfsVerbsVerbs).
func TestGuestRunNFSFromIB(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	nfsServer(t)
	// The control: the same work mounted straight across the RoCE fabric
	// (rxe0 to rxe1), no gateway.
	t.Run("direct", func(t *testing.T) {
		mnt := "/mnt/nfs-direct"
		nfsMount(t, ns.PeerIP.String(), guest.Device(t).IP.String(), mnt, 20049)
		var files map[string][]byte
		start := time.Now()
		within(t, 8*time.Minute, "write 16 MiB and the tree", func() error {
			var err error
			files, err = nfsWork(filepath.Join(mnt, "direct"), 1)
			if err == nil {
				unix.Sync()
			}
			return err
		})
		t.Logf("written directly in %v", time.Since(start).Round(time.Millisecond))
		within(t, 8*time.Minute, "read back", func() error { return nfsCompare(filepath.Join(mnt, "direct"), files) })
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	routeFromIB(t, ib.GatewayIP.String())
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) {
			// nfsd grants its client 64 credits, and RPC-over-RDMA never
			// expects an RNR NAK; 4 KiB is the client's inline size. Over
			// AF_XDP the route names its protocol instead, which keeps
			// those receives itself and parses every message (nothing to
			// stage: the server is behind the userspace leg).
			ibKeys, proto := "    receives: 128\n    receive_size: 4096\n", ""
			if io == "afxdp" {
				ibKeys, proto = "", "    protocol: nfs\n"
			}
			cfg := storageConfig(io, ns, ib, ibKeys, "nfs", 20050, 20049) + proto
			// What crosses each fabric: the client's side and the server's.
			ibTally, roceTally := tallyRoCE(t, "veth5"), tallyRoCE(t, "br1")
			logs := startGateway(t, cfg)
			stopWatch := watchdog(t, 100*time.Second, logs, ibTally, roceTally)
			defer stopWatch()
			mnt := "/mnt/nfs-" + io
			gw := ib.GatewayIP.String()
			nfsMount(t, gw, ib.PeerIP.String(), mnt, 20050)
			var files map[string][]byte
			start := time.Now()
			within(t, 8*time.Minute, "write 16 MiB and the tree", func() error {
				var err error
				files, err = nfsWork(filepath.Join(mnt, io), uint64(len(io)))
				if err == nil {
					unix.Sync()
				}
				return err
			})
			t.Logf("written through rbridge (%s) in %v", io, time.Since(start).Round(time.Millisecond))
			if err := unix.Unmount(mnt, 0); err != nil {
				t.Fatalf("unmount: %v", err)
			}
			nfsMount(t, gw, ib.PeerIP.String(), mnt, 20050)
			within(t, 8*time.Minute, "read back", func() error { return nfsCompare(filepath.Join(mnt, io), files) })
			if err := unix.Unmount(mnt, 0); err != nil {
				t.Errorf("unmount: %v", err)
			}
			if s := logs.String(); strings.Contains(s, "session failed") || strings.Contains(s, "level=ERROR") {
				t.Errorf("the gateway logged a failure:\n%s", lastLines(s, 60))
			}
			// A client on rxe that retransmits for any reason (a slow
			// answer under TCG) re-executes fast registrations it had
			// posted ("not free") and reconnects: logged, and bounded. The
			// stall this test was written for reconnected every 15 s.
			if d := dmesg("not free"); d != "" {
				t.Logf("the client's rxe re-executed a fast registration on a retry (it reconnected):\n%s", d)
			}
			if n := strings.Count(logs.String(), `msg="session up"`); n > 4 {
				t.Errorf("%d sessions for two mounts: the client kept reconnecting", n)
			}
			if proto != "" {
				m, _ := scrape(t, adminAddr(t, logs))
				calls := m[`rbridge_route_protocol_commands_total{direction="host_to_controller",protocol="nfs",route="nfs"}`]
				staged := m[`rbridge_route_staged_messages_total{direction="to_target",route="nfs"}`]
				if calls == 0 || staged != 0 {
					t.Errorf("protocol nfs: %.0f calls with read chunks counted, %.0f staged; want calls counted, none staged", calls, staged)
				}
			}
			waitSessionsEnded(t, logs)
		})
	}
	t.Run("verbs-verbs", func(t *testing.T) { nfsVerbsVerbs(t, ns, ib, true) })
}

// watchdog logs, once after d unless stopped first, what the gateway said,
// the kernel's RDMA and NFS lines, and where each of the test's threads
// waits in the kernel: I/O stuck there can hold the test where no
// deadline reaches it.
func watchdog(t *testing.T, d time.Duration, logs *syncBuffer, tallies ...fmt.Stringer) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-time.After(d):
		}
		var stacks strings.Builder
		tasks, _ := filepath.Glob("/proc/self/task/*/stack")
		for _, p := range tasks {
			b, _ := os.ReadFile(p)
			fmt.Fprintf(&stacks, "%s:\n%s", p, b)
		}
		var seen strings.Builder
		for i, tl := range tallies {
			fmt.Fprintf(&seen, "tally %d:\n%s", i, tl.String())
		}
		t.Logf("still running after %v\ngateway:\n%s\nkernel:\n%s\n%s\nthreads:\n%s\npackets:\n%s", d, lastLines(logs.String(), 60),
			dmesg("rdma"), dmesg("nfs"), stacks.String(), seen.String())
	}()
	return func() { close(done) }
}
