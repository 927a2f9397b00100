package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freePort asks the kernel for a UDP port that is free on every one of
// addrs (bench binds the same port on both of its addresses).
func freePort(t *testing.T, addrs ...string) string {
	t.Helper()
	for range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(addrs[0])})
		if err != nil {
			t.Fatal(err)
		}
		port := c.LocalAddr().(*net.UDPAddr).Port
		held, free := []*net.UDPConn{c}, true
		for _, a := range addrs[1:] {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(a), Port: port})
			if err != nil {
				free = false
				break
			}
			held = append(held, c)
		}
		for _, c := range held {
			c.Close()
		}
		if free {
			return strconv.Itoa(port)
		}
	}
	t.Fatalf("no UDP port free on all of %v", addrs)
	return ""
}

func TestBench(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2")
	out, progress, err := run(t, nil, "bench", "--duration", "1200ms", "--size", "1000", "--window", "8", "--port", port)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transport ", "udp ", "transport/udp: ", "(1000-byte messages, 8 outstanding, MTU 4096)",
		"per message  side", "transport    sender", "udp          receiver", "offload: transport gso ",
		"CPU, the process (both sides)", "transport/udp CPU per message: "} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(progress, "bench transport: ") || !strings.Contains(progress, "bench udp: ") {
		t.Errorf("no progress lines: %q", progress)
	}
	out, _, err = run(t, nil, "bench", "--duration", "200ms", "--json", "--size", "64", "--port", port, "--offload=false")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Results []struct {
			Path     string
			Messages uint64
			Offload  string
			Sender   benchCost
			Receiver benchCost
			CPU      *benchCPU
		}
		Ratio float64
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Results) != 2 || v.Results[0].Messages == 0 || v.Results[1].Messages == 0 || v.Ratio <= 0 {
		t.Fatalf("bench --json: %v %+v in %q", err, v, out)
	}
	// Without the offload every send and read is one datagram, and each
	// side made system calls for what it moved.
	for _, r := range v.Results {
		if !strings.HasPrefix(r.Offload, "gso off (turned off") || !strings.Contains(r.Offload, "gro off (turned off") {
			t.Errorf("%s: offload %q with --offload=false", r.Path, r.Offload)
		}
		// The process used CPU while the path ran, on at most the CPUs
		// it has (and a clock tick's rounding).
		if c := r.CPU; c == nil || c.total() <= 0 || c.UserUSPerMsg < 0 || c.SystemUSPerMsg < 0 || c.CPUsBusy <= 0 || c.CPUsBusy > float64(runtime.NumCPU())+0.5 {
			t.Errorf("%s: CPU %+v", r.Path, c)
		}
		if s, rc := r.Sender, r.Receiver; s.SendCalls <= 0 || rc.RecvCalls <= 0 || s.Sends != s.PacketsOut || rc.Reads != rc.PacketsIn || s.PacketsOut < 1 {
			t.Errorf("%s: sender %+v, receiver %+v", r.Path, s, rc)
		}
	}
}

// TestBenchBadFlags: a flag out of its range is refused before anything
// runs, naming the flag; a run shorter than demo's shortest (10 ms) too.
func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "0"}, "--size 0: want 1 byte to 1 GiB"},
		{[]string{"--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"--window", "0"}, "--window 0: want 1 to 1024"},
		{[]string{"--duration", "-1s"}, "--duration -1s: want 10ms to 1h"},
		{[]string{"--duration", "1ms"}, "--duration 1ms: want 10ms to 1h"},
		{[]string{"--duration", "1ns"}, "--duration 1ns: want 10ms to 1h"},
		{[]string{"--to", "not-an-ip"}, `"not-an-ip"`},
		{[]string{"--port", "0"}, "--port 0: want 1 to 65535"},
		{[]string{"--port", "65536"}, "--port 65536: want 1 to 65535"},
	} {
		if _, _, err := run(t, nil, append([]string{"bench"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchAddressFamilies: two addresses of different families, or one
// address twice, are refused before anything is opened (one panicked in
// the UDP conn, the other ran into "retry counter exceeded").
func TestBenchAddressFamilies(t *testing.T) {
	for _, tc := range []struct {
		from, to, want string
	}{
		{"127.0.0.1", "::1", "--from 127.0.0.1 and --to ::1: one is IPv4 and the other IPv6"},
		{"::1", "127.0.0.2", "--from ::1 and --to 127.0.0.2: one is IPv4 and the other IPv6"},
		{"::ffff:127.0.0.1", "::1", "one is IPv4 and the other IPv6"},
		{"127.0.0.1", "::ffff:127.0.0.1", "--from and --to are both 127.0.0.1"},
	} {
		_, _, err := run(t, nil, "bench", "--from", tc.from, "--to", tc.to, "--duration", "100ms")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench --from %s --to %s: %v, want an error containing %q", tc.from, tc.to, err, tc.want)
		}
	}
}

// TestBenchPortInUse: --port chooses the port, and a port in use says so.
func TestBenchPortInUse(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2")
	p, _ := strconv.Atoi(port)
	busy, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2"), Port: p})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, _, err = run(t, nil, "bench", "--duration", "100ms", "--port", port)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "127.0.0.2:"+port) {
		t.Errorf("bench on a port in use: %v, want EADDRINUSE naming 127.0.0.2:%s", err, port)
	}
}

// TestBenchTooShort: a run in which no message completed (a loaded host,
// a large --size) is an error that says so, not a rate of zero or a ratio
// of NaN ("json: unsupported value: NaN" before).
func TestBenchTooShort(t *testing.T) {
	o := benchOptions{size: 1 << 30, duration: 10 * time.Millisecond}
	err := result("transport", 0, 12*time.Millisecond, o.size).measured(o)
	if want := "no 1073741824-byte message arrived whole in 0.012s: --duration 10ms is too short to measure"; err == nil || err.Error() != want {
		t.Errorf("a run of no message: %v, want %q", err, want)
	}
	if err := result("transport", 1, 12*time.Millisecond, o.size).measured(o); err != nil {
		t.Errorf("a run of one message: %v", err)
	}
}

// TestBenchStopsAtDeadline: at the deadline the message on the wire may
// finish, but the run does not wait out the window: 512 outstanding 8 MiB
// WRITEs (4 GiB) kept a 300 ms run going for as long as they took, and
// every one of them was counted. The window is of 64 MiB messages (32 GiB),
// more than either path moves in 300 ms: plain UDP with the kernel's
// batching moved 541 of 8 MiB in that time, and a count under the window
// proved nothing.
func TestBenchStopsAtDeadline(t *testing.T) {
	port := freePort(t, "127.0.0.1", "127.0.0.2")
	out, _, err := run(t, nil, "bench", "--size", "67108864", "--window", "512", "--duration", "300ms", "--json", "--port", port)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Results []struct {
			Path     string
			Messages uint64
			Seconds  float64
		}
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Results) != 2 {
		t.Fatalf("bench --json: %v in %q", err, out)
	}
	t.Logf("%+v", v.Results)
	for _, r := range v.Results {
		if r.Messages == 0 || r.Messages >= 512 {
			t.Errorf("%s: %d messages in %.2fs: want some, and fewer than the window of 512 posted at once", r.Path, r.Messages, r.Seconds)
		}
	}
}

// TestBenchSizeOverLimit runs a 1 GiB bench under an address-space limit
// (ulimit -v) too small for both sides' message memory: it is refused with
// the limit named, where the Go heap used to end in "fatal error: out of
// memory" and a stack trace. The test runs itself again under the limit.
func TestBenchSizeOverLimit(t *testing.T) {
	if port := os.Getenv("RBRIDGE_TEST_BENCH_PORT"); port != "" {
		_, _, err := run(t, nil, "bench", "--size", "1073741824", "--duration", "1s", "--port", port)
		for _, want := range []string{"--size 1073741824: message memory for 127.0.0.", "arena larger than the memory available"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("bench under ulimit -v: %v, want an error containing %q", err, want)
			}
		}
		// The limit named is ulimit -v's, unless the machine or a cgroup
		// leaves even less.
		if err == nil || !(strings.Contains(err.Error(), "the address-space limit (ulimit -v) of ") ||
			strings.Contains(err.Error(), "MemAvailable") || strings.Contains(err.Error(), "cgroup")) {
			t.Errorf("bench under ulimit -v: %v names no limit", err)
		}
		t.Log(err)
		return
	}
	cmd := exec.Command("/bin/sh", "-c", `ulimit -v 2500000 && exec "$0" -test.run='^TestBenchSizeOverLimit$' -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), "RBRIDGE_TEST_BENCH_PORT="+freePort(t, "127.0.0.1", "127.0.0.2"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestBenchSizeOverLimit") {
		t.Fatalf("under ulimit -v 2500000: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
