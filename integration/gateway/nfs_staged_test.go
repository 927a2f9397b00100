package gateway_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
)

// NFS over RDMA the other way: nfsd on the IB side (rxe3), the client on
// the RoCE side, through a route with protocol: nfs. The server is the
// one-sided initiator behind the verbs leg: its READs of the client's
// read chunks and WRITEs of its write and reply chunks would reach the
// gateway's HCA, so the gateway stages every call's chunks.

// nfsStagedFiles are the files TestGuestRunNFSToIB writes: 4 KiB (a READ
// whose reply no longer fits inline: a write chunk) to past the 1 MiB
// staging class and the client's 1 MiB rsize and wsize (several calls,
// and a last one shorter than its chunk).
var nfsStagedFiles = []int{4 << 10, 60<<10 + 1, 200 << 10, 1 << 20, 1<<20 + 4<<10, 5 << 19}

// nfsStagedWork writes nfsStagedFiles (random bytes) under dir, and
// returns what it wrote.
func nfsStagedWork(dir string, seed uint64, sizes []int) (map[string][]byte, error) {
	rng := rand.New(rand.NewPCG(seed, 11))
	files := map[string][]byte{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for i, n := range sizes {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("f%d-%d", i, n)
		files[name] = b
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	unix.Sync()
	return files, nil
}

// nfsStagedCompare reads every file back from dir and compares it.
func nfsStagedCompare(dir string, files map[string][]byte) error {
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if string(got) != string(want) {
			return fmt.Errorf("%s: read back %d bytes, differing from the %d written", name, len(got), len(want))
		}
	}
	return nil
}

// nfsNames is how many files of long names nfsLongNames makes: their
// directory's listing (READDIR) does not fit the client's 4 KiB inline
// receive, so its reply comes through a reply chunk.
const nfsNames = 40

func nfsName(i int) string { return fmt.Sprintf("%03d-%s", i, strings.Repeat("n", 200)) }

// nfsLongNames makes nfsNames empty files of 204-byte names under dir.
func nfsLongNames(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range nfsNames {
		if err := os.WriteFile(filepath.Join(dir, nfsName(i)), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// nfsListNames lists dir and checks it holds nfsLongNames' files.
func nfsListNames(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) != nfsNames {
		return fmt.Errorf("%s lists %d files, want %d", dir, len(ents), nfsNames)
	}
	for i, e := range ents {
		if e.Name() != nfsName(i) {
			return fmt.Errorf("%s: entry %d is %.20s..., want %.20s...", dir, i, e.Name(), nfsName(i))
		}
	}
	return nil
}

// nfsToIB is TestGuestRunNFSToIB over a userspace leg of io: it writes
// files of sizes, and with tree lists a tree of nfsTreeFiles files with
// ls -lR after a remount.
func nfsToIB(t *testing.T, io string, ns guest.Netns, ib guest.IBFabric, sizes []int, tree bool) {
	var total int
	for _, n := range sizes {
		total += n
	}
	// 20050: nfsd's RDMA listener holds 20049 on every address of this
	// one kernel (the userspace leg's is not the kernel's, but the
	// verbs-verbs case's is).
	cfg := guestLegs(io, ns, ib, "") + fmt.Sprintf(`routes:
  - name: nfs
    listen: {leg: roce, addr: "%v:20050"}
    target: {leg: ib, addr: "%v:20049"}
    protocol: nfs
`, ns.IP, ib.PeerIP)
	logs := startGateway(t, cfg)
	stop := watchdog(t, 240*time.Second, logs)
	defer stop()
	mnt := "/mnt/nfs-to-ib-" + io
	nfsMount(t, ns.IP.String(), ns.PeerIP.String(), mnt, 20050)
	var files map[string][]byte
	start := time.Now()
	within(t, 6*time.Minute, "write the files", func() error {
		var err error
		if files, err = nfsStagedWork(filepath.Join(mnt, "to-ib"), 5, sizes); err != nil {
			return err
		}
		return nfsLongNames(filepath.Join(mnt, "names"))
	})
	if tree {
		// Made in the export itself: what the test is after is its
		// listing through the gateway, not 1,000 creations, which take
		// minutes under TCG.
		if err := nfsMakeTree(filepath.Join(nfsExport, "tree")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d bytes written through rbridge, staged, in %v", total, time.Since(start).Round(time.Millisecond))
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	nfsMount(t, ns.IP.String(), ns.PeerIP.String(), mnt, 20050)
	start = time.Now()
	within(t, 6*time.Minute, "read back", func() error {
		if err := nfsStagedCompare(filepath.Join(mnt, "to-ib"), files); err != nil {
			return err
		}
		return nfsListNames(filepath.Join(mnt, "names"))
	})
	t.Logf("read back after a remount in %v", time.Since(start).Round(time.Millisecond))
	if tree {
		start = time.Now()
		within(t, 4*time.Minute, "ls -lR the tree", func() error { return nfsListTree(filepath.Join(mnt, "tree")) })
		t.Logf("ls -lR of %d files in %d directories in %v", nfsTreeFiles, nfsTreeDirs, time.Since(start).Round(time.Millisecond))
	}
	m, _ := scrape(t, adminAddr(t, logs))
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Errorf("unmount: %v", err)
	}
	if s := logs.String(); strings.Contains(s, "session failed") || strings.Contains(s, "level=ERROR") {
		t.Errorf("the gateway logged a failure:\n%s", lastLines(s, 60))
	}
	// A client on rxe under TCG may time a call out (15 s: timeo=150)
	// when the machine is loaded, and reconnect to send it again:
	// logged, and bounded, as in TestGuestRunNFSFromIB.
	if n := strings.Count(logs.String(), `msg="session up"`); n > 2 {
		t.Logf("%d sessions for two mounts: the client reconnected\n%s\n%s", n, dmesg("rdma"), dmesg("nfs"))
		if n > 4 {
			t.Errorf("%d sessions for two mounts: the client kept reconnecting", n)
		}
	}
	waitSessionsEnded(t, logs)
	const route = `{direction="to_target",route="nfs"}`
	pulled, pushed, staged := m["rbridge_route_staging_pulled_bytes_total"+route], m["rbridge_route_staging_pushed_bytes_total"+route], m["rbridge_route_staged_bytes_total"+route]
	// Every byte written went in a read chunk but what fit inline
	// (the 4 KiB file's WRITE may); every byte read came in a write
	// chunk.
	if pulled < float64(total-8<<10) || pushed < float64(total) || staged < pulled+pushed {
		t.Errorf("staged %.0f bytes, pulled %.0f and pushed %.0f; want at least %d pulled and %d pushed", staged, pulled, pushed, total-8<<10, total)
	}
	for _, k := range []string{
		`rbridge_route_protocol_commands_total{direction="host_to_controller",protocol="nfs",route="nfs"}`,
		`rbridge_route_protocol_commands_total{direction="controller_to_host",protocol="nfs",route="nfs"}`,
		`rbridge_route_protocol_completions_total{protocol="nfs",route="nfs"}`,
	} {
		if m[k] == 0 {
			t.Errorf("%s = 0, want calls counted", k)
		}
	}
	for _, k := range []string{`rbridge_route_staging_in_use_bytes{route="nfs"}`, "rbridge_route_staging_failed_total" + route,
		`rbridge_route_protocol_gateway_completions_total{protocol="nfs",route="nfs"}`} {
		if v, ok := m[k]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, v, ok)
		}
	}
	t.Logf("staged: %.0f calls, %.0f bytes pulled, %.0f pushed, %.0f waits for the pool", m["rbridge_route_staged_messages_total"+route], pulled, pushed,
		m["rbridge_route_staging_waits_total"+route])
}

// nfsTreeFiles files in nfsTreeDirs directories: ls -lR of the tree is
// a READDIR per directory (each reply past the client's 4 KiB inline
// receive: a reply chunk) and a GETATTR per file.
const (
	nfsTreeFiles = 1000
	nfsTreeDirs  = 10
)

// nfsMakeTree makes the tree, each file holding its own name.
func nfsMakeTree(dir string) error {
	for d := range nfsTreeDirs {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for f := range nfsTreeFiles / nfsTreeDirs {
			name := fmt.Sprintf("file-%04d", d*nfsTreeFiles/nfsTreeDirs+f)
			if err := os.WriteFile(filepath.Join(sub, name), []byte(name), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// nfsListTree runs ls -lR on the tree and checks that it lists every
// file with its size.
func nfsListTree(dir string) error {
	out, err := exec.Command("ls", "-lR", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ls -lR: %v: %s", err, lastLines(string(out), 5))
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 9 && strings.HasPrefix(f[8], "file-") {
			if f[4] != "9" {
				return fmt.Errorf("ls -lR: %s: size %s, want 9", f[8], f[4])
			}
			n++
		}
	}
	if n != nfsTreeFiles {
		return fmt.Errorf("ls -lR lists %d files, want %d", n, nfsTreeFiles)
	}
	return nil
}

// TestGuestRunNFSToIB: the kernel's NFS client on the RoCE side (rxe1)
// mounts nfsd on the IB side (rxe3) through a route from the userspace
// leg to the verbs leg with protocol: nfs (vers=4.2, proto=rdma), writes
// files of 4 KiB to 16 MiB and a directory whose listing comes through a
// reply chunk, unmounts, mounts again, reads every byte and name back
// from the server, and lists a tree of 1,000 files (made in the export)
// with ls -lR; over AF_XDP, the files to 2.5 MiB and the names. No
// receives or receive size are configured: the protocol keeps what
// RPC-over-RDMA needs. The route's metrics show the
// calls by direction and the bytes staged, pulled (the WRITEs' data) and
// pushed (the READs'), and no staging is left held. Then the same with
// verbs legs on both sides (rxe0 on the RoCE segment), a smaller load.
// In the siw pass, the UDP leg's files with nfsd on siw1 behind a verbs
// leg on siw0 (no memory windows).
func TestGuestRunNFSToIB(t *testing.T) {
	ns := guest.UserNetns(t)
	ib, windows := stagingFabric(t)
	nfsServer(t)
	if !windows {
		// The siw pass: nfsd on siw1 READs and WRITEs staging exposed
		// on siw0 in a protection domain per connection.
		t.Run("udp", func(t *testing.T) { nfsToIB(t, "udp", ns, ib, nfsStagedFiles, false) })
		return
	}
	// The whole load over UDP (files to 16 MiB, the tree of 1,000
	// files); over AF_XDP the files to 2.5 MiB and the long names.
	t.Run("udp", func(t *testing.T) { nfsToIB(t, "udp", ns, ib, append(nfsStagedFiles, 16<<20), true) })
	t.Run("afxdp", func(t *testing.T) { nfsToIB(t, "afxdp", ns, ib, nfsStagedFiles, false) })
	t.Run("verbs-verbs", func(t *testing.T) { nfsVerbsVerbs(t, ns, ib, false) })
}

// nfsVerbsVerbs runs the gateway with verbs legs on both sides (rxe0 on
// the RoCE segment, the IB fabric's device) and a route nfs with
// protocol: nfs to nfsd on the IB side (rxe3), or, fromIB, on the RoCE
// side (rxe1) for a client on the IB fabric. The client mounts through
// it, writes files of 4 KiB and 1 MiB + 4 KiB, mounts again and reads
// them back; the route's counters show the data staged both ways (the
// server's READs and WRITEs reach one of the gateway's HCAs either way).
func nfsVerbsVerbs(t *testing.T, ns guest.Netns, ib guest.IBFabric, fromIB bool) {
	roceGW := netip.MustParseAddr("198.18.1.1") // rxe0's: the RoCE segment's other device
	// The client's leg receives its calls, inline up to 4 KiB.
	roceKeys, ibKeys := ", receive_size: 4096", ""
	listenLeg, listen, targetLeg, target, client := "roce", roceGW, "ib", ib.PeerIP, ns.PeerIP
	if fromIB {
		roceKeys, ibKeys = "", ", receive_size: 4096"
		listenLeg, listen, targetLeg, target, client = "ib", ib.GatewayIP, "roce", ns.PeerIP, ib.PeerIP
	}
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: verbs, ip: %v, device: rxe0%s}
  - {name: ib, kind: verbs, ip: %v, device: %s%s}
routes:
  - name: nfs
    listen: {leg: %s, addr: "%v:20050"}
    target: {leg: %s, addr: "%v:20049"}
    protocol: nfs
`, roceGW, roceKeys, ib.GatewayIP, ib.GatewayDevice, ibKeys, listenLeg, listen, targetLeg, target)
	logs := startGateway(t, cfg)
	stop := watchdog(t, 100*time.Second, logs)
	defer stop()
	mnt := "/mnt/nfs-verbs"
	nfsMount(t, listen.String(), client.String(), mnt, 20050)
	var files map[string][]byte
	within(t, 4*time.Minute, "write the files", func() error {
		var err error
		files, err = nfsStagedWork(filepath.Join(mnt, "verbs"), 6, []int{4 << 10, 1<<20 + 4<<10})
		return err
	})
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	nfsMount(t, listen.String(), client.String(), mnt, 20050)
	within(t, 4*time.Minute, "read back", func() error { return nfsStagedCompare(filepath.Join(mnt, "verbs"), files) })
	m, _ := scrape(t, adminAddr(t, logs))
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Errorf("unmount: %v", err)
	}
	if s := logs.String(); strings.Contains(s, "session failed") || strings.Contains(s, "level=ERROR") {
		t.Errorf("the gateway logged a failure:\n%s", lastLines(s, 60))
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("client=%v:", client)) {
		t.Errorf("no session from the client's %v:\n%s", client, lastLines(logs.String(), 20))
	}
	waitSessionsEnded(t, logs)
	const route = `{direction="to_target",route="nfs"}`
	if m["rbridge_route_staging_pulled_bytes_total"+route] == 0 || m["rbridge_route_staging_pushed_bytes_total"+route] < 1<<20 {
		t.Errorf("pulled %.0f and pushed %.0f bytes: want the files' data staged both ways", m["rbridge_route_staging_pulled_bytes_total"+route], m["rbridge_route_staging_pushed_bytes_total"+route])
	}
}
