package gateway_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/integration/guest"
)

// The kernel's SCSI RDMA Protocol initiator (ib_srp) and LIO's SRP target
// (ib_srpt), both on RDMA/CM, configured by hand through sysfs and
// configfs, with a RAM disk (rd_mcp) as the target's LUN. As in iSER, the
// target is the one-sided initiator: it READs a write's data from the
// initiator's memory and WRITEs a read's into it, at the addresses and
// rkeys the initiator's SRP_CMD names.

const (
	// srptPort is srpt's RDMA/CM port. srpt listens on it at every
	// address of the guest's one kernel, the gateway's IB address among
	// them, so the route listens on srpRoutePort.
	srptPort     = 5555
	srpRoutePort = 5556
)

// TestGuestRunSRPFromIB: the kernel's SRP initiator on the IB fabric
// (rxe3) logs in over RDMA/CM through `rbridge run` to LIO's SRP target
// on the RoCE side (rxe1), on a route with no protocol. The target's
// READs and WRITEs reach the gateway's own transport, which relays them
// to the initiator's memory with the initiator's own addresses and rkeys:
// nothing is staged, and the gateway needs to know nothing of SRP. Every
// channel the initiator opens is a session from the IB fabric's address
// and takes the immediate data the target's login response (in its
// connect reply) offers; 32 MiB of random data in I/Os of 4 KiB to 1 MiB
// is written and read back over the UDP leg, 16 MiB over AF_XDP; the
// route's counters show the target's READs and WRITEs carried it, and
// the initiator never had to recover a channel or abort a command.
func TestGuestRunSRPFromIB(t *testing.T) {
	// Not in the siw pass: the test's devices are the IB fabric's and
	// rxe1 in every pass, so it would run the same twice.
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	// ib_srp binds no source address unless told one (src=): the rule
	// sends the kernel's own traffic to the gateway's IB address over the
	// fabric's wire, from rxe3, as an initiator's host in an IB island
	// reaches the gateway.
	routeFromIB(t, ib.GatewayIP.String())
	guid := srpTarget(t, ns.PeerDevice, srpInitiatorPort(t, ib.PeerDevice))
	for _, run := range []struct {
		io   string
		span int
		seed uint64
	}{{"udp", 32 << 20, 21}, {"afxdp", 16 << 20, 22}} {
		t.Run(run.io, func(t *testing.T) {
			cfg := guestLegs(run.io, ns, ib, "") + srpRoute("ib", ib.GatewayIP, "roce", ns.PeerIP, "")
			srpThrough(t, cfg, ib.PeerDevice, fmt.Sprintf("%v:%d", ib.GatewayIP, srpRoutePort), guid, ib.PeerIP, false, run.span, run.seed)
		})
	}
}

// TestGuestRunSRPToIB: the placement that needs staging. The kernel's SRP
// initiator on the RoCE side (rxe1) logs in through the userspace leg to
// LIO's SRP target on the IB fabric (rxe3), on a route with protocol:
// srp: the target's READs and WRITEs, which the gateway's IB HCA (rxe2)
// executes against the gateway's memory, reach staging the gateway
// exposed for each command, pulled from and pushed to the initiator's
// memory by the gateway's own READs and WRITEs. 32 MiB written and read
// back over the UDP leg, 16 MiB over AF_XDP, every byte of the writes
// past their immediate data pulled and every byte read pushed, and no
// staging left held.
func TestGuestRunSRPToIB(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	guid := srpTarget(t, ib.PeerDevice, srpInitiatorPort(t, ns.PeerDevice))
	for _, run := range []struct {
		io   string
		span int
		seed uint64
	}{{"udp", 32 << 20, 23}, {"afxdp", 16 << 20, 24}} {
		t.Run(run.io, func(t *testing.T) {
			cfg := guestLegs(run.io, ns, ib, "") + srpRoute("roce", ns.IP, "ib", ib.PeerIP, config.ProtocolSRP)
			srpThrough(t, cfg, ns.PeerDevice, fmt.Sprintf("%v:%d", ns.IP, srpRoutePort), guid, ns.PeerIP, true, run.span, run.seed)
		})
	}
}

// TestGuestRunSRPVerbsVerbs: TestGuestRunSRPToIB with verbs legs on both
// sides (rxe0 on the RoCE segment, rxe2 on the IB fabric), as a gateway
// with an IB HCA and a RoCE NIC is: the target's READs and WRITEs reach
// the gateway's IB HCA, and the gateway's pulls and pushes are its RoCE
// HCA's READs and WRITEs of the initiator's memory (rxe1). 8 MiB.
func TestGuestRunSRPVerbsVerbs(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	guid := srpTarget(t, ib.PeerDevice, srpInitiatorPort(t, ns.PeerDevice))
	roceGW := netip.MustParseAddr("198.18.1.1") // rxe0's: the RoCE segment's other device
	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: verbs, ip: %v, device: rxe0}
  - {name: ib, kind: verbs, ip: %v, device: %s}
`, roceGW, ib.GatewayIP, ib.GatewayDevice) + srpRoute("roce", roceGW, "ib", ib.PeerIP, config.ProtocolSRP)
	srpThrough(t, cfg, ns.PeerDevice, fmt.Sprintf("%v:%d", roceGW, srpRoutePort), guid, netip.Addr{}, true, 8<<20, 25)
}

// srpRoute is a config's routes: the route "srp" from leg listen at
// addr:srpRoutePort to leg target at to:srptPort, with protocol when it
// is not "".
func srpRoute(listen string, addr netip.Addr, target string, to netip.Addr, protocol string) string {
	s := fmt.Sprintf(`routes:
  - name: srp
    listen: {leg: %s, addr: "%v:%d"}
    target: {leg: %s, addr: "%v:%d"}
`, listen, addr, srpRoutePort, target, to, srptPort)
	if protocol != "" {
		s += "    protocol: " + protocol + "\n"
	}
	return s
}

// srpInitiatorPort is the port ID ib_srp logs in with from dev's port 1:
// its initiator_ext (0 unless given) and the interface ID of the port's
// GID 0, "0x" and 32 hex digits, as srpt names its ACLs.
func srpInitiatorPort(t testing.TB, dev string) string {
	return "0x0000000000000000" + gid0(t, dev)[16:]
}

// srpThrough runs the gateway with cfg (its route "srp" to srpTarget's
// target), has the initiator on initiatorDev log in through dest, moves
// span bytes of I/O (written at 4 KiB to 1 MiB, read back and compared)
// and logs out; then checks what the gateway, its route's counters and
// the initiator's kernel say: every session from client (when valid), one
// per channel, each using immediate data; no channel recovered; with
// staged (the target behind a verbs leg), the bytes the gateway pulled
// and pushed and no staging held; without, the target's own READs and
// WRITEs relayed and nothing staged.
func srpThrough(t *testing.T, cfg, initiatorDev, dest, guid string, client netip.Addr, staged bool, span int, seed uint64) {
	t.Helper()
	// The kernel's lines from here on follow this one.
	mark := "rbridge: " + t.Name() + " starts"
	if err := os.WriteFile("/dev/kmsg", []byte(mark+"\n"), 0o200); err != nil {
		t.Fatalf("/dev/kmsg: %v", err)
	}
	logs := startGateway(t, cfg)
	admin := adminAddr(t, logs)
	retries := retryCounts()
	host, dev := srpLogin(t, initiatorDev, dest, guid)
	channels := srpChannels(t, host)
	start := time.Now()
	blockIO(t, dev, span, span, seed, "srp")
	t.Logf("%d MiB written and read back through rbridge over SRP (%d channels, staged: %v) in %v", span>>20, channels, staged, time.Since(start).Round(time.Millisecond))
	srpLogout(t, host)
	waitSessionsEnded(t, logs)

	if strings.Contains(logs.String(), "session failed") {
		t.Errorf("a session failed:\n%s", lastLines(logs.String(), 40))
	}
	up := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="session up"`) {
			up++
			if client.IsValid() && !strings.Contains(l, fmt.Sprintf("client=%v:", client)) {
				t.Errorf("a session not from %v: %s", client, l)
			}
		}
	}
	if up != channels {
		t.Errorf("%d sessions came up for the initiator's %d channels", up, channels)
	}
	out, err := exec.Command("dmesg").CombinedOutput()
	if err != nil {
		t.Fatalf("dmesg: %v\n%s", err, out)
	}
	lines := string(out)
	if i := strings.LastIndex(lines, mark); i >= 0 {
		lines = lines[i:]
	} else {
		t.Errorf("the kernel's log lost the test's start (%q): its ring overflowed", mark)
	}
	// The target sets the login response's immediate data flag, on every
	// channel: the login crossed in the connect reply.
	if n := strings.Count(lines, "using immediate data"); n != channels {
		t.Errorf("%d of the initiator's %d channels use immediate data:\n%s", n, channels, dmesg("srp"))
	}
	// A channel that failed (a work request completed in error) and was
	// reconnected, or a command the SCSI layer had to abort: the I/O
	// survives either, but the path failed it.
	for _, bad := range []string{"ib_srp: failed ", "reconnect", "SRP abort called", "SRP reset"} {
		if strings.Contains(lines, bad) {
			guest.Artifact(t, "srp-gateway-debug.log", []byte(logs.String()))
			t.Errorf("the initiator logged %q (the gateway's debug log is the artifact srp-gateway-debug.log):\n%s", bad, dmesg("srp"))
			break
		}
	}

	m, _ := scrape(t, admin)
	const route = `{route="srp"}`
	if n := m["rbridge_route_sessions_total"+route]; n != float64(channels) {
		t.Errorf("the route counted %v sessions, want the initiator's %d channels", n, channels)
	}
	key := func(name, dir, opcode string) string {
		return fmt.Sprintf(`%s{direction=%q,opcode=%q,route="srp"}`, name, dir, opcode)
	}
	read, wrote := m[key("rbridge_route_payload_bytes_total", "to_client", "read")], m[key("rbridge_route_payload_bytes_total", "to_client", "write")]
	pulled, pushed := m[`rbridge_route_staging_pulled_bytes_total{direction="to_target",route="srp"}`], m[`rbridge_route_staging_pushed_bytes_total{direction="to_target",route="srp"}`]
	// The target READs what is written, less what crosses as immediate
	// data (writes of 8 KiB and less, a hundredth of the bytes at these
	// sizes), and WRITEs what is read: span twice (the device's content
	// first, then to compare), and what the kernel reads of a new disk.
	moved, back := read, wrote
	if staged {
		moved, back = pulled, pushed
	}
	if wantRead := span * 9 / 10; moved < float64(wantRead) || back < float64(2*span) {
		t.Errorf("the target READ %.0f and WROTE %.0f bytes of the initiator's memory through the route (staged: %v), want at least %d and %d", moved, back, staged, wantRead, 2*span)
	}
	if staged && (read != 0 || wrote != 0) {
		t.Errorf("the target's READs (%.0f bytes) and WRITEs (%.0f) reached the initiator past staging", read, wrote)
	}
	if !staged && (pulled != 0 || pushed != 0) {
		t.Errorf("staging pulled %.0f and pushed %.0f bytes with the target behind the userspace leg, want none", pulled, pushed)
	}
	for _, dir := range []string{"to_target", "to_client"} {
		if v, ok := m[fmt.Sprintf(`rbridge_route_operations_failed_total{direction=%q,route="srp"}`, dir)]; !ok || v != 0 {
			t.Errorf("operations failed %s = %v (present %v), want 0", dir, v, ok)
		}
	}
	if staged {
		for _, k := range []string{`rbridge_route_staging_in_use_bytes{route="srp"}`, `rbridge_route_staging_failed_total{direction="to_target",route="srp"}`} {
			if v, ok := m[k]; !ok || v != 0 {
				t.Errorf("%s = %v (present %v), want 0", k, v, ok)
			}
		}
		for _, why := range []string{"malformed_command", "malformed_completion", "unknown_command_id", "reused_command_id", "unstageable"} {
			if v := m[fmt.Sprintf(`rbridge_route_protocol_errors_total{protocol="srp",route="srp",why=%q}`, why)]; v != 0 {
				t.Errorf("protocol errors %s = %v, want 0", why, v)
			}
		}
	}
	t.Logf("the target READ %.0f bytes and WROTE %.0f (staged: pulled %.0f, pushed %.0f); the initiator SENT %.0f messages (its commands); the devices' transport retries meanwhile: %s",
		read, wrote, pulled, pushed, m[key("rbridge_route_operations_total", "to_target", "send")], retriesSince(retries))
}

// retryCounts is each RDMA device's completer_retry_err: the times its
// requester's retransmit timer fired (a peer that did not acknowledge in
// time).
func retryCounts() map[string]int {
	out := map[string]int{}
	files, _ := filepath.Glob("/sys/class/infiniband/*/ports/1/hw_counters/completer_retry_err")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if n, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			out[strings.Split(f, "/")[4]] = n
		}
	}
	return out
}

// retriesSince says each device's retries since before, as retryCounts
// counts them.
func retriesSince(before map[string]int) string {
	var parts []string
	for dev, n := range retryCounts() {
		parts = append(parts, fmt.Sprintf("%s %d", dev, n-before[dev]))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// srpChannels is how many channels (RDMA/CM connections) ib_srp's SCSI
// host host connected.
func srpChannels(t testing.TB, host int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/scsi_host/host%d/ch_count", host))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		t.Fatalf("host%d's ch_count: %q, %v", host, b, err)
	}
	return n
}

// gid0 is dev's port 1's GID 0 in 32 hex digits, as srpt and ib_srp
// read it.
func gid0(t testing.TB, dev string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, "ports/1/gids/0"))
	gid := strings.ReplaceAll(strings.TrimSpace(string(b)), ":", "")
	if err != nil || len(gid) != 32 {
		t.Fatalf("%s's GID 0: %q, %v", dev, b, err)
	}
	return gid
}

// srpTarget exports a 64 MiB RAM disk through LIO's srpt on dev's port 1
// to the initiator ports initiators (each a 128-bit port ID, "0x" and 32
// hex digits), with srpt's RDMA/CM listener on srptPort, until the test
// ends. It returns the target port's identifier, srpt's service GUID
// (hex), which an initiator gives as id_ext and ioc_guid.
func srpTarget(t testing.TB, dev string, initiators ...string) string {
	t.Helper()
	if out, err := exec.Command("/usr/sbin/modprobe", "ib_srpt").CombinedOutput(); err != nil {
		t.Fatalf("modprobe ib_srpt: %v\n%s", err, out)
	}
	disk := lioRAMDisk(t, "rd_mcp_1/srp0")
	// srpt names each port twice when it finds the device: by its GID 0
	// ("0x" and 32 hex digits) and by that GID's interface ID. A session
	// through a port named by GID is named after the initiator's port
	// ID, which the ACL below names.
	fabric := filepath.Join(lioConfig, "srpt")
	port := filepath.Join(fabric, "0x"+gid0(t, dev))
	tpg := filepath.Join(port, "tpgt_1")
	lun := filepath.Join(tpg, "lun/lun_0")
	link := filepath.Join(lun, "srp0")
	// srpt's RDMA/CM port is a configfs attribute of the fabric in 6.1,
	// not a module parameter; 0 closes the listener.
	listener := filepath.Join(fabric, "discovery_auth/rdma_cm_port")
	var acls []string // each ACL's link, its LUN and itself, to remove
	t.Cleanup(func() {
		_ = os.WriteFile(listener, []byte("0"), 0o644)
		_ = os.WriteFile(filepath.Join(tpg, "enable"), []byte("0"), 0o644)
		for _, p := range append(acls, link, lun, tpg, port, fabric) {
			_ = os.Remove(p)
		}
	})
	lioMkdir(t, lun)
	if err := os.Symlink(disk, link); err != nil {
		t.Fatalf("lio: map the LUN: %v", err)
	}
	// srpt has no demo mode (no generate_node_acls): an initiator logs
	// in through an ACL of its own, whose LUN is mapped read-write.
	for _, initiator := range initiators {
		acl := filepath.Join(tpg, "acls", initiator)
		mapped := filepath.Join(acl, "lun_0")
		mappedLink := filepath.Join(mapped, "lun_0")
		acls = append(acls, mappedLink, mapped, acl)
		lioMkdir(t, mapped)
		if err := os.Symlink(lun, mappedLink); err != nil {
			t.Fatalf("lio: map the LUN to %s: %v", initiator, err)
		}
	}
	lioWrite(t, filepath.Join(tpg, "enable"), "1")
	lioWrite(t, listener, strconv.Itoa(srptPort))
	// The node GUID of the first device srpt found, unless set when it
	// was loaded.
	b, err := os.ReadFile("/sys/module/ib_srpt/parameters/srpt_service_guid")
	guid := strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
	if err != nil || guid == "" {
		t.Fatalf("srpt's service GUID: %q, %v", b, err)
	}
	return guid
}

// srpLogin has ib_srp log in from dev's port 1 over RDMA/CM to the SRP
// target at dest (address:port) whose identifier is guid, and returns the
// SCSI host it made and its disk (/dev/sdX). The target port is removed
// when the test ends, if srpLogout has not removed it.
func srpLogin(t testing.TB, dev, dest, guid string) (host int, disk string) {
	t.Helper()
	if out, err := exec.Command("/usr/sbin/modprobe", "-a", "ib_srp", "sd_mod").CombinedOutput(); err != nil {
		t.Fatalf("modprobe ib_srp sd_mod: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("id_ext=%s,ioc_guid=%s,dest=%s", guid, guid, dest)
	// The write returns once every channel is connected and the new SCSI
	// host's LUNs are scanned; a connect that is not answered retries
	// for minutes.
	done := make(chan error, 1)
	go func() {
		done <- os.WriteFile(filepath.Join("/sys/class/infiniband_srp", "srp-"+dev+"-1", "add_target"), []byte(opts), 0o200)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ib_srp: add_target %s: %v\n%s", opts, err, dmesg("srp"))
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("ib_srp: add_target %s did not return within 2 minutes\n%s", opts, dmesg("srp"))
	}
	ports, _ := filepath.Glob("/sys/class/srp_remote_ports/port-*")
	if len(ports) != 1 {
		t.Fatalf("ib_srp: %d remote ports after add_target (%v), want 1", len(ports), ports)
	}
	if _, err := fmt.Sscanf(filepath.Base(ports[0]), "port-%d:", &host); err != nil {
		t.Fatalf("ib_srp: remote port %s: %v", ports[0], err)
	}
	t.Cleanup(func() { srpLogout(t, host) })
	return host, scsiDisk(t, fmt.Sprintf("/sys/class/scsi_host/host%d/device/target*/*:*:*:*/block/*", host))
}

// srpLogout removes the SRP target port of SCSI host host, if it is
// there, and waits for the host to go: ib_srp disconnects its channels.
func srpLogout(t testing.TB, host int) {
	t.Helper()
	ports, _ := filepath.Glob(fmt.Sprintf("/sys/class/srp_remote_ports/port-%d:*", host))
	if len(ports) == 0 {
		return
	}
	if err := os.WriteFile(filepath.Join(ports[0], "delete"), []byte("1"), 0o200); err != nil {
		t.Errorf("ib_srp: delete %s: %v", ports[0], err)
		return
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/sys/class/scsi_host/host%d", host)); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("ib_srp: host%d still there 60 s after its target port was deleted\n%s", host, dmesg("srp"))
			return
		}
	}
}
