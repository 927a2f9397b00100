package harness

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// feed gives the console every line of text.
func feed(c *Console, text string) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		c.Line(sc.Text())
	}
}

func summaries(c *Console) []string {
	var s []string
	for _, p := range c.Passes {
		s = append(s, p.Summary())
	}
	return s
}

// A console captured from a real guest run in which the topology test still
// read siw's netdev from sysfs (where iWARP devices have none) and failed.
func TestConsoleCapturedRun(t *testing.T) {
	b, err := os.ReadFile("testdata/console-failing-run.txt")
	if err != nil {
		t.Fatal(err)
	}
	c := &Console{}
	feed(c, string(b))

	if c.Kernel != "6.1.0-57-amd64" || !c.StatusSeen || c.Status != 1 || c.Step != "tests" || c.Failure != "" {
		t.Errorf("kernel %q status %v/%d step %q failure %q, want 6.1.0-57-amd64, STATUS rc=1 after step tests",
			c.Kernel, c.StatusSeen, c.Status, c.Step, c.Failure)
	}
	want := []string{
		"SUMMARY github.com/rbridge/rbridge/integration rxe0 pass=9 fail=3 skip=0",
		"SUMMARY github.com/rbridge/rbridge/integration/guest rxe0 pass=9 fail=0 skip=2",
		"SUMMARY github.com/rbridge/rbridge/integration siw0 pass=8 fail=4 skip=0",
		"SUMMARY github.com/rbridge/rbridge/integration/guest siw0 pass=9 fail=0 skip=2",
	}
	if diff := cmp.Diff(want, summaries(c)); diff != "" {
		t.Errorf("summaries (-want +got):\n%s", diff)
	}
	if got, want := c.Passes[0].Failures, []string{"TestGuestDevices/siw0", "TestGuestDevices/siw1", "TestGuestDevices"}; !cmp.Equal(got, want) {
		t.Errorf("failures of the rxe0 pass = %q, want %q", got, want)
	}
	if c.Passes[0].OK() || !c.Passes[1].OK() {
		t.Errorf("OK() = %v, %v; want false for the failing pass, true for the passing one", c.Passes[0].OK(), c.Passes[1].OK())
	}

	var got []string
	for _, f := range c.Figures {
		got = append(got, f.Tool+" "+f.Kind+": "+f.Result())
	}
	wantFigs := []string{
		"ib_send_bw rxe: 30.08 MB/sec average (peak 30.47), 0.000481 Mpps",
		"ib_write_bw rxe: 20.23 MB/sec average (peak 25.38), 0.000324 Mpps",
		"ib_read_bw rxe: 31.10 MB/sec average (peak 31.18), 0.000498 Mpps",
		"ib_send_lat rxe: 23.64 usec typical, 28.57 average, 129.52 p99",
		"rping rxe: ok: 200 ping-pongs (RDMA READ+WRITE each)",
		"ib_send_bw siw: 29.80 MB/sec average (peak 37.75), 0.000477 Mpps",
		"ib_write_bw siw: 25.37 MB/sec average (peak 34.74), 0.000406 Mpps",
		"ib_read_bw siw: 9.77 MB/sec average (peak 17.03), 0.000156 Mpps",
		"ib_send_lat siw: 41.35 usec typical, 58.46 average, 332.85 p99",
		"rping siw: ok: 200 ping-pongs (RDMA READ+WRITE each)",
	}
	if diff := cmp.Diff(wantFigs, got); diff != "" {
		t.Errorf("baseline (-want +got):\n%s", diff)
	}
}

func TestConsoleMarkerAfterUnterminatedOutput(t *testing.T) {
	c := &Console{}
	feed(c, "@@RB BEGIN ibv rxe0\n"+
		`{"Action":"run","Package":"p","Test":"TestA"}`+"\n"+
		`{"Action":"pass","Package":"p","Test":"TestA"}`+"\n"+
		`{"Action":"pass","Package":"p"}`+"\n"+
		"no newline here@@RB END ibv rxe0 rc=0\n")
	if diff := cmp.Diff([]string{"SUMMARY p rxe0 pass=1 fail=0 skip=0"}, summaries(c)); diff != "" {
		t.Errorf("summaries (-want +got):\n%s", diff)
	}
}

func TestConsoleKernelMessageInsideEvent(t *testing.T) {
	c := &Console{}
	feed(c, "@@RB BEGIN ibv rxe0\n"+
		`[   12.5] rdma_rxe: some warning{"Action":"skip","Package":"p","Test":"TestA"}`+"\n"+
		`{"Action":"pass","Package":"p"}`+"\n"+
		"@@RB END ibv rxe0 rc=0\n")
	if diff := cmp.Diff([]string{"SUMMARY p rxe0 pass=0 fail=0 skip=1"}, summaries(c)); diff != "" {
		t.Errorf("summaries (-want +got):\n%s", diff)
	}
}

func TestConsoleBaselineRetry(t *testing.T) {
	c := &Console{}
	feed(c, "@@RB BASE BEGIN ib_send_bw rxe\n"+
		"Correlation coefficient r^2: 0.48 < 0.9\nCan't produce a report\n"+
		"@@RB BASE RETRY ib_send_bw rxe: perftest could not calibrate its clock under TCG (r^2 < 0.9)\n"+
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"+
		" 65536      1000             30.47              30.08  		   0.000481\n"+
		"@@RB BASE END ib_send_bw rxe rc=0 elapsed_ms=2850 iters=1000\n")
	if len(c.Figures) != 1 {
		t.Fatalf("%d figures, want 1", len(c.Figures))
	}
	f := c.Figures[0]
	if !f.OK() || f.Retries != 1 || f.ElapsedMS != 2850 || f.Iters != 1000 {
		t.Errorf("figure OK %v retries %d elapsed %d iters %d, want OK after 1 retry, 2850 ms, 1000 iterations",
			f.OK(), f.Retries, f.ElapsedMS, f.Iters)
	}
	if got, want := BaselineTable(c.Figures), "BASELINE    over  bytes  iters  wall   gateway CPU  result\n"+
		"ib_send_bw  rxe   65536  1000   2.9 s  -            30.08 MB/sec average (peak 30.47), 0.000481 Mpps [retried 1x: see the console]\n"; got != want {
		t.Errorf("BaselineTable:\n%s\nwant:\n%s", got, want)
	}
}

// A pair through rbridge run carries the gateway's CPU time: per iteration
// in the table.
func TestConsoleBaselineThroughGateway(t *testing.T) {
	c := &Console{}
	feed(c, "@@RB BASE BEGIN ib_write_bw rbridge-afxdp\n"+
		" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"+
		" 65536      1000             12.47              12.08  		   0.000191\n"+
		"@@RB BASE END ib_write_bw rbridge-afxdp rc=0 elapsed_ms=5600 iters=1000 gateway_cpu_ticks=250\n")
	if len(c.Figures) != 1 || c.Figures[0].GatewayCPUTicks != 250 {
		t.Fatalf("figures %+v, want one with 250 gateway CPU ticks", c.Figures)
	}
	if got, want := BaselineTable(c.Figures), "BASELINE     over           bytes  iters  wall   gateway CPU  result\n"+
		"ib_write_bw  rbridge-afxdp  65536  1000   5.6 s  2500 us/op   12.08 MB/sec average (peak 12.47), 0.000191 Mpps\n"; got != want {
		t.Errorf("BaselineTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestPassFinish(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []Event
		rc     int
		want   string
		ok     bool
		reason string
	}{
		{
			name:   "all passed",
			events: []Event{{Action: "run", Test: "A"}, {Action: "pass", Test: "A"}, {Action: "pass"}},
			want:   "SUMMARY p rxe0 pass=1 fail=0 skip=0",
			ok:     true,
		},
		{
			name:   "timeout panic while a test runs",
			events: []Event{{Action: "run", Test: "A"}, {Action: "run", Test: "B"}, {Action: "pass", Test: "A"}, {Action: "fail"}},
			rc:     2,
			want:   "SUMMARY p rxe0 pass=1 fail=1 skip=0",
			reason: "B (never ended)",
		},
		{
			name:   "binary failed outside any test",
			events: []Event{{Action: "output", Output: "error while loading shared libraries"}, {Action: "fail"}},
			rc:     127,
			want:   "SUMMARY p rxe0 pass=0 fail=1 skip=0",
			reason: "test binary exited with status 127 outside any test",
		},
		{
			name:   "exit 0 without PASS",
			events: []Event{{Action: "run", Test: "A"}, {Action: "skip", Test: "A"}},
			want:   "SUMMARY p rxe0 pass=0 fail=1 skip=1",
			reason: "test binary ended without reporting PASS",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPass("p", "rxe0")
			for _, e := range tc.events {
				e.Package = "p"
				p.event(e)
			}
			p.finish(tc.rc)
			if got := p.Summary(); got != tc.want {
				t.Errorf("Summary() = %q, want %q", got, tc.want)
			}
			if p.OK() != tc.ok {
				t.Errorf("OK() = %v, want %v", p.OK(), tc.ok)
			}
			if tc.reason != "" && (len(p.Failures) == 0 || p.Failures[len(p.Failures)-1] != tc.reason) {
				t.Errorf("Failures = %q, want it to end with %q", p.Failures, tc.reason)
			}
		})
	}
}

func TestWhere(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &Console{Now: func() time.Time { return now }}
	if got, want := c.Where(), "last step: none (the kernel did not reach /init)"; got != want {
		t.Errorf("Where() before init = %q, want %q", got, want)
	}
	feed(c, "@@RB STEP tests\n@@RB BEGIN ibv siw0\n"+`{"Action":"run","Package":"github.com/rbridge/rbridge/ibv","Test":"TestHang"}`+"\n")
	now = now.Add(90 * time.Second)
	want := "last step: tests; in github.com/rbridge/rbridge/ibv on siw0, running TestHang (started 1m30s before)"
	if got := c.Where(); got != want {
		t.Errorf("Where() = %q, want %q", got, want)
	}
	c = &Console{}
	feed(c, "@@RB STEP baseline\n@@RB BASE BEGIN ib_read_bw siw\n")
	if got, want := c.Where(), "last step: baseline; in baseline ib_read_bw over siw"; got != want {
		t.Errorf("Where() = %q, want %q", got, want)
	}
}

// fileLines are the console lines init.sh's artifacts sends for a file:
// base64 in lines of 76 characters (busybox's), each marked, then its end
// with the size and SHA-256.
func fileLines(id, device, name string, data []byte) []string {
	b64 := base64.StdEncoding.EncodeToString(data)
	var lines []string
	for len(b64) > 0 {
		n := min(76, len(b64))
		lines = append(lines, fmt.Sprintf("@@RB FILE %s %s %s %s", id, device, name, b64[:n]))
		b64 = b64[n:]
	}
	sum := sha256.Sum256(data)
	return append(lines, fmt.Sprintf("@@RB FILE-END %s %s %s bytes=%d sha256=%x", id, device, name, len(data), sum))
}

// TestConsoleArtifacts: a file a test binary left arrives whole, between
// other output, without its base64 echoed; one that lost a line, or whose
// line a kernel message ran into, is reported, not kept.
func TestConsoleArtifacts(t *testing.T) {
	scrape := []byte("# HELP rbridge_leg_up 1 while the leg's link carries traffic.\n# TYPE rbridge_leg_up gauge\nrbridge_leg_up{leg=\"ib\"} 1\n" +
		strings.Repeat("rbridge_nic_rcvd_pkts_total{device=\"rxe2\",leg=\"ib\",port=\"1\"} 12345\n", 20))
	good := fileLines("gateway", "rxe0", "metrics.prom", scrape)
	lost := fileLines("gateway", "siw0", "metrics.prom", scrape)
	lost = append(lost[:2], lost[3:]...)
	mangled := fileLines("bridge", "rxe0", "x.prom", scrape)
	mangled[1] = mangled[1][:40] + "[   12.345678] rxe: a kernel message" // no newline between
	empty := fileLines("bridge", "siw0", "empty.prom", nil)
	text := strings.Join(append(append(append(append([]string{"@@RB BEGIN gateway rxe0", "@@RB END gateway rxe0 rc=0"}, good...),
		lost...), mangled...), empty...), "\n")
	var out strings.Builder
	c := &Console{Out: &out}
	feed(c, text)
	if len(c.Artifacts) != 4 {
		t.Fatalf("%d artifacts, want 4", len(c.Artifacts))
	}
	if a := c.Artifacts[0]; a.Err != nil || a.ID != "gateway" || a.Device != "rxe0" || a.Name != "metrics.prom" || string(a.Data) != string(scrape) {
		t.Errorf("the whole file: %+v", a)
	}
	for _, a := range c.Artifacts[1:3] {
		if a.Err == nil || a.Data != nil {
			t.Errorf("%s of %s on %s arrived broken, but no error: %d bytes", a.Name, a.ID, a.Device, len(a.Data))
		}
	}
	if a := c.Artifacts[3]; a.Err != nil || len(a.Data) != 0 {
		t.Errorf("an empty file: %+v", a)
	}
	if strings.Contains(out.String(), "@@RB FILE gateway") || !strings.Contains(out.String(), "@@RB FILE-END gateway rxe0 metrics.prom") {
		t.Errorf("echoed:\n%s\nwant the files' ends, not their lines", out.String())
	}
}
