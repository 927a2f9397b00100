package gateway_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// The kernel's NVMe over Fabrics host and target (nvme-rdma, nvmet-rdma)
// through rbridge run, with a ramdisk (brd) as the namespace. The target
// is the one-sided initiator: it READs a write's data from the host's
// memory and WRITEs a read's into it, in pieces of up to the host's
// largest transfer (128 KiB and more), so every I/O crosses the gateway
// as RDMA READs and WRITEs as well as the capsules' SENDs.

const nvmeNQN = "nqn.2026-12.io.rbridge:test"

// nvmeTarget exports /dev/ram0 over RDMA at addr:4420 through configfs,
// until the test ends.
func nvmeTarget(t testing.TB, addr string) {
	t.Helper()
	for _, m := range [][]string{{"brd", "rd_nr=1", "rd_size=131072"}, {"nvmet"}, {"nvmet-rdma"}, {"nvme-rdma"}} {
		if out, err := exec.Command("/usr/sbin/modprobe", m...).CombinedOutput(); err != nil {
			t.Fatalf("modprobe %v: %v\n%s", m, err, out)
		}
	}
	cfs := "/sys/kernel/config"
	if _, err := os.Stat(cfs + "/nvmet"); err != nil {
		if err := unix.Mount("configfs", cfs, "configfs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			t.Fatalf("mount configfs: %v", err)
		}
	}
	sub := filepath.Join(cfs, "nvmet/subsystems", nvmeNQN)
	ns := filepath.Join(sub, "namespaces/1")
	port := filepath.Join(cfs, "nvmet/ports/1")
	write := func(path, v string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			t.Fatalf("nvmet: write %q to %s: %v", v, path, err)
		}
	}
	for _, d := range []string{sub, ns, port} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatalf("nvmet: %v", err)
		}
	}
	write(filepath.Join(sub, "attr_allow_any_host"), "1")
	write(filepath.Join(sub, "attr_serial"), "rbridge0042")
	write(filepath.Join(ns, "device_path"), "/dev/ram0")
	write(filepath.Join(ns, "enable"), "1")
	write(filepath.Join(port, "addr_trtype"), "rdma")
	write(filepath.Join(port, "addr_adrfam"), "ipv4")
	write(filepath.Join(port, "addr_traddr"), addr)
	write(filepath.Join(port, "addr_trsvcid"), "4420")
	link := filepath.Join(port, "subsystems", nvmeNQN)
	if err := os.Symlink(sub, link); err != nil {
		t.Fatalf("nvmet: enable the port: %v", err)
	}
	t.Cleanup(func() {
		_ = os.Remove(link)
		_ = os.Remove(port)
		_ = os.WriteFile(filepath.Join(ns, "enable"), []byte("0"), 0o644)
		_ = os.Remove(ns)
		_ = os.Remove(sub)
	})
}

// nvmeConnect connects the kernel's host to nqn at traddr:4420 from
// hostAddr and returns the controller's name (nvmeN); the test's end
// disconnects it.
func nvmeConnect(t testing.TB, traddr, hostAddr string) string {
	t.Helper()
	return nvmeConnectNQN(t, traddr, hostAddr, nvmeNQN)
}

// nvmeDiscoveryNQN is the well-known NQN of a discovery controller.
const nvmeDiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// nvmeConnectNQN is nvmeConnect to the subsystem nqn.
func nvmeConnectNQN(t testing.TB, traddr, hostAddr, nqn string) string {
	t.Helper()
	return nvmeConnectLoss(t, traddr, hostAddr, nqn, 30*time.Second)
}

// nvmeConnectLoss is nvmeConnectNQN with the host's ctrl_loss_tmo: how
// long it tries to reconnect a controller whose path failed (every 5 s)
// before it removes it.
func nvmeConnectLoss(t testing.TB, traddr, hostAddr, nqn string, loss time.Duration) string {
	t.Helper()
	f, err := os.OpenFile("/dev/nvme-fabrics", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/nvme-fabrics: %v", err)
	}
	defer f.Close()
	opts := fmt.Sprintf("transport=rdma,traddr=%s,trsvcid=4420,nqn=%s,host_traddr=%s,nr_io_queues=2,queue_size=32,ctrl_loss_tmo=%d,reconnect_delay=5",
		traddr, nqn, hostAddr, int(loss.Seconds()))
	if _, err := f.Write([]byte(opts)); err != nil {
		res, _ := exec.Command("rdma", "res", "show", "qp").CombinedOutput()
		t.Fatalf("nvme connect %s: %v\n%s\n%s\nrdma res show qp:\n%s", opts, err, dmesg("nvme"), dmesg("rxe"), res)
	}
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	var instance, cntlid int
	if _, err := fmt.Sscanf(string(buf[:n]), "instance=%d,cntlid=%d", &instance, &cntlid); err != nil {
		t.Fatalf("nvme connect answered %q: %v", buf[:n], err)
	}
	ctrl := fmt.Sprintf("nvme%d", instance)
	t.Cleanup(func() { nvmeDisconnect(t, ctrl) })
	return ctrl
}

func nvmeDisconnect(t testing.TB, ctrl string) {
	path := "/sys/class/nvme/" + ctrl + "/delete_controller"
	if _, err := os.Stat(path); err != nil {
		return // gone already
	}
	if err := os.WriteFile(path, []byte("1"), 0o200); err != nil {
		t.Errorf("disconnect %s: %v", ctrl, err)
	}
}

// dmesg returns the kernel's log lines that mention what.
func dmesg(what string) string {
	out, _ := exec.Command("dmesg").CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(strings.ToLower(l), what) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep[max(len(keep)-40, 0):], "\n")
}

// nvmeIO writes total bytes of random data to dev at random 4 KiB-aligned
// offsets within the first span bytes, in I/Os of 4 KiB to 1 MiB, with
// O_DIRECT (every I/O reaches the target), then reads span back in mixed
// sizes and compares every byte. It runs under a deadline: I/O stuck in
// the kernel leaves its thread in uninterruptible sleep.
func nvmeIO(t *testing.T, dev string, span, total int, seed uint64) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- nvmeIOOnce(dev, span, total, seed) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\n%s", err, dmesg("nvme"))
		}
	case <-time.After(6 * time.Minute):
		t.Fatalf("I/O on %s did not end within 6 minutes\n%s", dev, dmesg("nvme"))
	}
}

func nvmeIOOnce(dev string, span, total int, seed uint64) error {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)
	const maxIO = 1 << 20
	buf, err := unix.Mmap(-1, 0, maxIO, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	shadow := make([]byte, span)
	// Start from what the device holds, so bytes never written compare too.
	for off := 0; off < span; off += maxIO {
		if _, err := unix.Pread(fd, buf, int64(off)); err != nil {
			return fmt.Errorf("read %s at %d: %w", dev, off, err)
		}
		copy(shadow[off:], buf)
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	sizes := []int{4 << 10, 8 << 10, 64 << 10, 128 << 10, 132 << 10, 256 << 10, 1 << 20}
	for written := 0; written < total; {
		n := sizes[rng.IntN(len(sizes))]
		off := rng.IntN((span-n)/4096+1) * 4096
		for i := range n {
			buf[i] = byte(rng.Uint32())
		}
		if k, err := unix.Pwrite(fd, buf[:n], int64(off)); err != nil || k != n {
			return fmt.Errorf("write %d bytes to %s at %d: %d, %v", n, dev, off, k, err)
		}
		copy(shadow[off:], buf[:n])
		written += n
	}
	for off := 0; off < span; {
		n := min(sizes[rng.IntN(len(sizes))], span-off)
		if k, err := unix.Pread(fd, buf[:n], int64(off)); err != nil || k != n {
			return fmt.Errorf("read %d bytes from %s at %d: %d, %v", n, dev, off, k, err)
		}
		if !bytes.Equal(buf[:n], shadow[off:off+n]) {
			i := 0
			for buf[i] == shadow[off+i] {
				i++
			}
			return fmt.Errorf("%s: byte %d read back as %#x, written as %#x", dev, off+i, buf[i], shadow[off+i])
		}
		off += n
	}
	return nil
}

// TestGuestRunNVMeFromIB: the kernel's NVMe-oF host on the IB fabric
// (rxe3) reaches the target on the RoCE side (rxe1) through a route on the
// verbs leg: admin and two I/O queues come up, 64 MiB of random data in
// I/Os of 4 KiB to 1 MiB is written and read back, and the host sees the
// target's own serial. The target's READs of 128 KiB and more cross the
// gateway's userspace leg; they used to end the session.
func TestGuestRunNVMeFromIB(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) {
			nvmeTarget(t, ns.PeerIP.String())
			cfg := storageConfig(io, ns, ib, "", "nvme", 4420, 4420)
			logs := startGateway(t, cfg)
			ctrl := nvmeConnect(t, ib.GatewayIP.String(), ib.PeerIP.String())
			serial, err := os.ReadFile("/sys/class/nvme/" + ctrl + "/serial")
			if err != nil || strings.TrimSpace(string(serial)) != "rbridge0042" {
				t.Errorf("%s's serial: %q, %v; want the target's rbridge0042", ctrl, serial, err)
			}
			dev := nvmeDisk(t, ctrl)
			start := time.Now()
			nvmeIO(t, dev, 64<<20, 64<<20, 1)
			t.Logf("64 MiB written and read back through rbridge (%s) in %v", io, time.Since(start).Round(time.Millisecond))
			// Again after a reconnect: a new admin and I/O queues.
			nvmeDisconnect(t, ctrl)
			ctrl = nvmeConnect(t, ib.GatewayIP.String(), ib.PeerIP.String())
			dev = nvmeDisk(t, ctrl)
			nvmeIO(t, dev, 8<<20, 8<<20, 2)
			nvmeDisconnect(t, ctrl)
			if strings.Contains(logs.String(), "session failed") {
				t.Errorf("a session failed:\n%s", lastLines(logs.String(), 40))
			}
			waitSessionsEnded(t, logs)
		})
	}
}

// TestGuestRunNVMeToIB: the kernel's NVMe-oF host on the RoCE side
// (rxe1) reaches nvmet-rdma on the IB side (rxe3) through a route from
// the userspace leg to the verbs leg with protocol: nvme. The target is
// the one-sided initiator behind the verbs leg: its READs and WRITEs
// reach the gateway's HCA, so the gateway stages every command's data
// (the admin queue's 1 KiB Connect data first). Admin and two I/O queues
// come up, 64 MiB of random data in I/Os of 4 KiB to 1 MiB is written and
// read back, the host sees the target's own serial, and again after a
// reconnect; the route's staging counters show the bytes pulled and
// pushed, and no staging is left held. In the siw pass the target is on
// siw1 and the verbs leg on siw0, which has no memory windows.
func TestGuestRunNVMeToIB(t *testing.T) {
	ns := guest.UserNetns(t)
	ib, windows := stagingFabric(t)
	ios := []string{"udp", "afxdp"}
	if !windows {
		// The siw pass: nvmet-rdma on siw1, staged over siw0 with a
		// protection domain per connection. The userspace leg's io is the
		// rxe pass's concern.
		ios = ios[:1]
	}
	for _, io := range ios {
		t.Run(io, func(t *testing.T) {
			nvmeTarget(t, ib.PeerIP.String())
			cfg := guestLegs(io, ns, ib, nvmeReceives) + fmt.Sprintf(`routes:
  - name: nvme
    listen: {leg: roce, addr: "%v:4420"}
    target: {leg: ib, addr: "%v:4420"}
    protocol: nvme
`, ns.IP, ib.PeerIP)
			logs := startGateway(t, cfg)
			// nvme discover through the route: the discovery controller's
			// log page (controller to host, so pushed through staging)
			// lists the target's subsystem.
			disc := nvmeConnectNQN(t, ns.IP.String(), ns.PeerIP.String(), nvmeDiscoveryNQN)
			if subs, err := nvmeDiscoveryLog("/dev/" + disc); err != nil || !slices.Contains(subs, nvmeNQN) {
				t.Errorf("the discovery log through rbridge: %q, %v; want it to list %s", subs, err, nvmeNQN)
			}
			nvmeDisconnect(t, disc)
			ctrl := nvmeConnect(t, ns.IP.String(), ns.PeerIP.String())
			serial, err := os.ReadFile("/sys/class/nvme/" + ctrl + "/serial")
			if err != nil || strings.TrimSpace(string(serial)) != "rbridge0042" {
				t.Errorf("%s's serial: %q, %v; want the target's rbridge0042", ctrl, serial, err)
			}
			dev := nvmeDisk(t, ctrl)
			start := time.Now()
			nvmeIO(t, dev, 64<<20, 64<<20, 3)
			t.Logf("64 MiB written and read back through rbridge (%s), staged, in %v", io, time.Since(start).Round(time.Millisecond))
			// A read the target fails (past the namespace's end: the block
			// layer would refuse it, so it goes as a passthrough command)
			// reaches the host with the target's own status: nvmet-rdma
			// over a block device answers Internal Error (its bio fails),
			// not the Data Transfer Error the gateway would make (and
			// rbridge_route_protocol_gateway_completions_total stays 0).
			st, err := nvmeReadPast(dev, 128<<20/512)
			if err != nil || st == 0 || nvme.Status(st)&0x7ff == nvme.StatusDataXferError {
				t.Errorf("a read past the namespace's end: status %v, %v; want the target's own failure", nvme.Status(st), err)
			}
			t.Logf("a read past the namespace's end: the target's %v", nvme.Status(st))
			nvmeDisconnect(t, ctrl)
			ctrl = nvmeConnect(t, ns.IP.String(), ns.PeerIP.String())
			dev = nvmeDisk(t, ctrl)
			nvmeIO(t, dev, 8<<20, 8<<20, 4)
			nvmeDisconnect(t, ctrl)
			if strings.Contains(logs.String(), "session failed") {
				t.Errorf("a session failed:\n%s", lastLines(logs.String(), 40))
			}
			waitSessionsEnded(t, logs)
			// The data crossed through staging: every byte written was
			// pulled from the host but what went in the capsule (writes of
			// up to the target's in-capsule size, 8 KiB), every byte read
			// pushed to it (each pass reads its span twice: what the device
			// held, then back).
			m, _ := scrape(t, adminAddr(t, logs))
			const route = `{direction="to_target",route="nvme"}`
			pulled, pushed := m["rbridge_route_staging_pulled_bytes_total"+route], m["rbridge_route_staging_pushed_bytes_total"+route]
			if pulled < 64<<20 || pushed < 2*72<<20 {
				t.Errorf("staging pulled %.0f and pushed %.0f bytes, want at least %d and %d", pulled, pushed, 64<<20, 2*72<<20)
			}
			for _, k := range []string{`rbridge_route_staging_in_use_bytes{route="nvme"}`, "rbridge_route_staging_failed_total" + route,
				`rbridge_route_protocol_gateway_completions_total{protocol="nvme",route="nvme"}`} {
				if v, ok := m[k]; !ok || v != 0 {
					t.Errorf("%s = %v (present %v), want 0", k, v, ok)
				}
			}
			t.Logf("staged: %.0f commands, %.0f bytes pulled, %.0f pushed, %.0f waits for the pool", m["rbridge_route_staged_messages_total"+route], pulled, pushed,
				m["rbridge_route_staging_waits_total"+route])
			// Without windows every connection to the target (a discovery
			// controller's, each queue's, twice over) had a PD of its own.
			if pds := m[`rbridge_verbs_staging_own_pds_total{leg="ib"}`]; windows && pds != 0 || !windows && pds < 7 {
				t.Errorf(`rbridge_verbs_staging_own_pds_total{leg="ib"} = %v with memory windows %v; want 0 with, at least 7 without`, pds, windows)
			}
		})
	}
}

// TestGuestRunNVMeVerbsVerbs: a gateway with verbs legs on both sides
// (rxe0 on the RoCE segment, rxe2 on the IB fabric), as a gateway with
// an IB HCA and a RoCE NIC is: whichever side the target is on, its
// READs and WRITEs reach one of the gateway's HCAs, so every command's
// data is staged, and moved by the HCAs (the gateway's READs and WRITEs
// on the host's side). Both placements: the host on the RoCE side (rxe1)
// with the target on the IB side (rxe3), and the reverse.
func TestGuestRunNVMeVerbsVerbs(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	roceGW := netip.MustParseAddr("198.18.1.1") // rxe0's: the RoCE segment's other device
	for _, tc := range []struct {
		name                     string
		target, listen, hostAddr netip.Addr
		targetLeg, listenLeg     string
	}{
		{"host on RoCE, target on IB", ib.PeerIP, roceGW, ns.PeerIP, "ib", "roce"},
		{"host on IB, target on RoCE", ns.PeerIP, ib.GatewayIP, ib.PeerIP, "roce", "ib"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nvmeTarget(t, tc.target.String())
			cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: verbs, ip: %v, device: rxe0, receives: 128, receive_size: 16384}
  - {name: ib, kind: verbs, ip: %v, device: %s, receives: 128, receive_size: 16384}
routes:
  - name: nvme
    listen: {leg: %s, addr: "%v:4420"}
    target: {leg: %s, addr: "%v:4420"}
    protocol: nvme
`, roceGW, ib.GatewayIP, ib.GatewayDevice, tc.listenLeg, tc.listen, tc.targetLeg, tc.target)
			logs := startGateway(t, cfg)
			ctrl := nvmeConnect(t, tc.listen.String(), tc.hostAddr.String())
			serial, err := os.ReadFile("/sys/class/nvme/" + ctrl + "/serial")
			if err != nil || strings.TrimSpace(string(serial)) != "rbridge0042" {
				t.Errorf("%s's serial: %q, %v; want the target's rbridge0042", ctrl, serial, err)
			}
			dev := nvmeDisk(t, ctrl)
			start := time.Now()
			// 16 MiB: the userspace leg's test moves 64 (this path's
			// figures are the benchmark's, BenchmarkGuestNVMeThroughVsDirect).
			nvmeIO(t, dev, 16<<20, 16<<20, 5)
			t.Logf("16 MiB written and read back through rbridge (verbs legs both sides), staged, in %v", time.Since(start).Round(time.Millisecond))
			nvmeDisconnect(t, ctrl)
			if strings.Contains(logs.String(), "session failed") {
				t.Errorf("a session failed:\n%s", lastLines(logs.String(), 40))
			}
			waitSessionsEnded(t, logs)
			m, _ := scrape(t, adminAddr(t, logs))
			const route = `{direction="to_target",route="nvme"}`
			if pulled, pushed := m["rbridge_route_staging_pulled_bytes_total"+route], m["rbridge_route_staging_pushed_bytes_total"+route]; pulled < 12<<20 || pushed < 2*16<<20 {
				t.Errorf("staging pulled %.0f and pushed %.0f bytes, want at least %d and %d", pulled, pushed, 12<<20, 2*16<<20)
			}
		})
	}
}

// nvmeReadPast sends a 4 KiB read at block slba of dev (512-byte blocks)
// as a passthrough command (NVME_IOCTL_IO_CMD, struct nvme_passthru_cmd
// in linux/nvme_ioctl.h) and returns the NVMe status the ioctl gives
// back (0 for success).
func nvmeReadPast(dev string, slba uint64) (uint32, error) {
	fd, err := unix.Open(dev, unix.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(buf)
	var cmd [72]byte
	cmd[0] = 0x02                             // Read
	binary.LittleEndian.PutUint32(cmd[4:], 1) // nsid
	binary.LittleEndian.PutUint64(cmd[24:], uint64(uintptr(unsafe.Pointer(&buf[0]))))
	binary.LittleEndian.PutUint32(cmd[36:], 4096) // data_len
	binary.LittleEndian.PutUint32(cmd[40:], uint32(slba))
	binary.LittleEndian.PutUint32(cmd[44:], uint32(slba>>32))
	binary.LittleEndian.PutUint32(cmd[48:], 7) // cdw12: 8 blocks, 0-based
	const nvmeIoctlIOCmd = 0xC0484E43          // _IOWR('N', 0x43, 72 bytes)
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nvmeIoctlIOCmd, uintptr(unsafe.Pointer(&cmd[0])))
	if errno != 0 {
		return 0, errno
	}
	return uint32(r), nil
}

// nvmeDiscoveryLog reads the discovery log page (Get Log Page 0x70, 4
// KiB, as an admin passthrough: NVME_IOCTL_ADMIN_CMD) of the discovery
// controller ctrl and returns the subsystem NQNs its records name
// (struct nvmf_disc_rsp_page_hdr and _entry in linux/nvme.h: the record
// count at byte 8, records of 1024 bytes from byte 1024, each one's
// subnqn at byte 256).
func nvmeDiscoveryLog(ctrl string) ([]string, error) {
	fd, err := unix.Open(ctrl, unix.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	const size = 4096
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(buf)
	var cmd [72]byte
	cmd[0] = 0x02 // Get Log Page
	binary.LittleEndian.PutUint64(cmd[24:], uint64(uintptr(unsafe.Pointer(&buf[0]))))
	binary.LittleEndian.PutUint32(cmd[36:], size)
	binary.LittleEndian.PutUint32(cmd[40:], (size/4-1)<<16|0x70) // NUMDL, the discovery log
	const nvmeIoctlAdminCmd = 0xC0484E41                         // _IOWR('N', 0x41, 72 bytes)
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd[0])))
	if errno != 0 {
		return nil, errno
	}
	if r != 0 {
		return nil, fmt.Errorf("get log page: status %v", nvme.Status(r))
	}
	n := binary.LittleEndian.Uint64(buf[8:])
	var subs []string
	for i := uint64(0); i < n && 1024*(i+2) <= size; i++ {
		e := buf[1024*(i+1):]
		subs = append(subs, strings.TrimRight(string(e[256:512]), "\x00 "))
	}
	return subs, nil
}

// nvmePath is a namespace's directory under a controller in sysfs: with
// native multipath nvme<subsystem>c<controller>n<namespace>, whose disk is
// the subsystem's nvme<subsystem>n<namespace>; without, the disk itself.
var nvmePath = regexp.MustCompile(`^nvme(\d+)c\d+n(\d+)$`)

// nvmeDisk waits for the block device of controller ctrl's first
// namespace and returns its path. Its name is the subsystem's when the
// kernel does native multipath (Debian's does), which need not be the
// controller's: after a disconnect and a new connect, the old disk can
// still be there, going, under the controller's name (open gives ENXIO).
func nvmeDisk(t testing.TB, ctrl string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		ents, _ := os.ReadDir("/sys/class/nvme/" + ctrl)
		for _, e := range ents {
			dev := ""
			if m := nvmePath.FindStringSubmatch(e.Name()); m != nil && m[2] == "1" {
				dev = "/dev/nvme" + m[1] + "n1"
			} else if e.Name() == ctrl+"n1" {
				dev = "/dev/" + e.Name()
			}
			if dev == "" {
				continue
			}
			if f, err := os.Open(dev); err == nil {
				f.Close()
				return dev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no block device of %s's first namespace opened within 10 s (%v)\n%s", ctrl, ents, dmesg("nvme"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits up to 10 s for path to exist.
func waitFile(t testing.TB, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 10 s\n%s", path, dmesg("nvme"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
