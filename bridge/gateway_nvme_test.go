package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/nvme"
	"github.com/rbridge/rbridge/ulp/nvme/nvmetest"
)

// pollWCs waits for n completions on cq.
func pollWCs(t *testing.T, ctx context.Context, cq *transport.CQ, n int, what string) []transport.WC {
	t.Helper()
	var got []transport.WC
	wcs := make([]transport.WC, n)
	for len(got) < n {
		k, err := cq.PollWait(ctx, wcs[:n-len(got)])
		if err != nil {
			t.Fatalf("%s: %d of %d completions: %v", what, len(got), n, err)
		}
		got = append(got, wcs[:k]...)
	}
	return got
}

// wcsByID hands out a CQ's completions by work request ID, whatever
// order they come in.
type wcsByID struct {
	cq   *transport.CQ
	seen map[uint64]transport.WC
}

func (w *wcsByID) wait(t *testing.T, ctx context.Context, id uint64, what string) transport.WC {
	t.Helper()
	if w.seen == nil {
		w.seen = map[uint64]transport.WC{}
	}
	for {
		if wc, ok := w.seen[id]; ok {
			delete(w.seen, id)
			return wc
		}
		for _, wc := range pollWCs(t, ctx, w.cq, 1, what) {
			w.seen[wc.ID] = wc
		}
	}
}

// TestGatewayNVMeRoute: on a route with protocol: nvme, a host (the
// client) and a controller (the target, the one-sided initiator, on a
// userspace leg as the placement that works today) run commands through
// the gateway as before: a write whose data the controller READs from
// the host's memory, a read whose data it WRITEs there, each answered by
// its completion. /metrics counts them per route and protocol (promtool
// clean), /status names the route's protocol; a message from the host
// that is not a command capsule fails at the host and ends the session,
// counted.
func TestGatewayNVMeRoute(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, "    protocol: nvme\n"))
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, tc, cqp := dialThrough(t, ctx, client, target, ln, "1:7471")
	tqp := tc.QP()

	// Host memory: the write's data at 64 KiB, the read's buffer at
	// 128 KiB; capsules at 0 and 4 KiB; receives for completions at 8 KiB
	// and up. The controller's receives are at 0 and 4 KiB (dialThrough).
	const wdata, rdata, rlen, wlen = 64 << 10, 128 << 10, 12000, 8192
	for i := range wlen {
		client.mem[wdata+i] = byte(i*13 + 1)
	}
	clear(client.mem[rdata : rdata+rlen])
	want := make([]byte, rlen)
	for i := range want {
		want[i] = byte(i*7 + 3)
	}
	for i := range 2 {
		if err := cqp.PostRecv(transport.RecvWR{ID: 10 + uint64(i), Local: transport.SGE{MR: client.mr, Offset: 8192 + i*64, Length: 64}}); err != nil {
			t.Fatal(err)
		}
	}
	caps := [][]byte{
		nvmetest.Command(nvme.OpWrite, 1, nvmetest.Keyed(client.mr.Addr()+wdata, wlen, client.mr.RKey(), nvme.SGLAddress), nil),
		nvmetest.Command(nvme.OpRead, 2, nvmetest.Keyed(client.mr.Addr()+rdata, rlen, client.mr.RKey(), nvme.SGLInvalidate), nil),
	}
	for i, c := range caps {
		copy(client.mem[i*4096:], c)
		if err := cqp.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: client.mr, Offset: i * 4096, Length: len(c)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The controller: each capsule as it arrives, its data moved by RDMA
	// on the controller's own QP, then its completion.
	tcq := &wcsByID{cq: target.cq}
	for i := range caps {
		wc := tcq.wait(t, ctx, uint64(i+1), "a capsule at the controller")
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the controller's receive %d: %+v", i, wc)
		}
		c, err := nvme.ParseCapsule(target.mem[i*4096 : i*4096+wc.ByteLen])
		if err != nil {
			t.Fatalf("the controller got no capsule: %v", err)
		}
		d := c.Keyed().At(0)
		op := transport.OpRead // a write: the controller READs the host's data
		if c.Command().Direction() == nvme.DirControllerToHost {
			op = transport.OpWrite
			copy(target.mem[256<<10:], want)
		}
		if err := tqp.PostSend(transport.SendWR{ID: 100 + uint64(i), Opcode: op, Signaled: true, Remote: d.Address(), RKey: d.Key(),
			Local: transport.SGE{MR: target.mr, Offset: 256 << 10, Length: int(d.Length())}}); err != nil {
			t.Fatal(err)
		}
		if w := tcq.wait(t, ctx, 100+uint64(i), "the controller's RDMA"); w.Status != transport.StatusSuccess {
			t.Fatalf("the controller's %v of the host's memory: %v", op, w.Status)
		}
		if op == transport.OpRead && !bytes.Equal(target.mem[256<<10:256<<10+wlen], client.mem[wdata:wdata+wlen]) {
			t.Fatal("the controller READ other bytes than the host's")
		}
		copy(target.mem[512<<10+i*64:], nvmetest.Completion(c.Command().CommandID(), nvme.StatusSuccess))
		if err := tqp.PostSend(transport.SendWR{ID: 200 + uint64(i), Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: target.mr, Offset: 512<<10 + i*64, Length: nvme.CompletionLen}}); err != nil {
			t.Fatal(err)
		}
		if w := tcq.wait(t, ctx, 200+uint64(i), "the completion's SEND"); w.Status != transport.StatusSuccess {
			t.Fatalf("the completion's SEND: %v", w.Status)
		}
	}
	// The host: both SENDs and both completions.
	recvs := 0
	for _, wc := range pollWCs(t, ctx, client.cq, 4, "the host's SENDs and completions") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the host's %+v: %v", wc, wc.Status)
		}
		if wc.ID >= 10 {
			cqe := nvme.Completion(client.mem[8192+int(wc.ID-10)*64:])
			if wc.ByteLen != nvme.CompletionLen || cqe.CommandID() != uint16(wc.ID-9) {
				t.Errorf("the host's completion %d: %d bytes, command %d", wc.ID-10, wc.ByteLen, cqe.CommandID())
			}
			recvs++
		}
	}
	if recvs != 2 || !bytes.Equal(client.mem[rdata:rdata+rlen], want) {
		t.Fatalf("the host got %d completions, and the read's data %v", recvs, bytes.Equal(client.mem[rdata:rdata+rlen], want))
	}

	m, b := scrape(t, base)
	promtool(t, b)
	const lbl = `protocol="nvme",route="r"`
	for name, v := range map[string]float64{
		`rbridge_route_protocol_commands_total{direction="host_to_controller",` + lbl + `}`: 1,
		`rbridge_route_protocol_commands_total{direction="controller_to_host",` + lbl + `}`: 1,
		`rbridge_route_protocol_commands_total{direction="none",` + lbl + `}`:               0,
		`rbridge_route_protocol_descriptors_total{` + lbl + `}`:                             2,
		`rbridge_route_protocol_described_bytes_total{` + lbl + `}`:                         wlen + rlen,
		`rbridge_route_protocol_remote_invalidations_total{` + lbl + `}`:                    1,
		`rbridge_route_protocol_completions_total{` + lbl + `}`:                             2,
		`rbridge_route_protocol_errors_total{` + lbl + `,why="malformed_command"}`:          0,
		`rbridge_route_protocol_errors_total{` + lbl + `,why="unknown_command_id"}`:         0,
		// The controller's READ and WRITE passed the protocol by.
		`rbridge_route_operations_total{direction="to_client",opcode="read",route="r"}`:  1,
		`rbridge_route_operations_total{direction="to_client",opcode="write",route="r"}`: 1,
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || st.Routes[0].Protocol != "nvme" {
		t.Errorf("/status routes: %+v, want r with protocol nvme", st.Routes)
	}
	if !regexp.MustCompile(`"protocol":\s*"nvme"`).Match(get(t, base+"/status")) {
		t.Error(`/status has no "protocol": "nvme"`)
	}
	if b, err := json.Marshal(bridge.RouteStatus{Name: "plain"}); err != nil || strings.Contains(string(b), "protocol") {
		t.Errorf("a route without a protocol: %s (%v), want no protocol field", b, err)
	}

	// Not a capsule: refused at the host, the session ends, counted.
	copy(client.mem, "not an NVMe capsule")
	if err := cqp.PostSend(transport.SendWR{ID: 3, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: client.mr, Length: 19}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWCs(t, ctx, client.cq, 1, "the refused SEND")[0]; wc.Status != transport.StatusRemInvReqErr {
		t.Errorf("a SEND that is no capsule completed %v at the host, want remote invalid request", wc.Status)
	}
	waitUntil(t, "the session ended", func() bool { return g.Sessions() == 0 })
	m, b = scrape(t, base)
	promtool(t, b)
	if got := m[`rbridge_route_protocol_errors_total{`+lbl+`,why="malformed_command"}`]; got != 1 {
		t.Errorf("malformed commands counted: %v, want 1", got)
	}
	if d := cmp.Diff(0.0, m[`rbridge_route_protocol_commands_total{direction="none",`+lbl+`}`]); d != "" {
		t.Errorf("the refused message counted as a command (-want +got):\n%s", d)
	}
}
