package bridge_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// TestGatewayNFSRoute: on a route with protocol: nfs, an RPC-over-RDMA
// client and server (the server the one-sided initiator, on a userspace
// leg: nothing is staged) run an NFS READ-shaped call through the
// gateway: the server WRITEs the data into the client's write chunk and
// replies with the echo. /metrics counts the call and its reply per route
// and protocol (promtool clean), /status names the protocol; a message
// that is not RPC-over-RDMA version 1 fails at the client and ends the
// session, counted.
func TestGatewayNFSRoute(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, "    protocol: nfs\n"))
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, tc, cqp := dialThrough(t, ctx, client, target, ln, "1:7471")
	tqp := tc.QP()

	// The call at 0, its write chunk at 64 KiB (12 KiB: the server
	// writes 10000), the reply's receive at 8 KiB.
	const chunk, data, n = 12 << 10, 64 << 10, 10000
	clear(client.mem[data : data+chunk])
	if err := cqp.PostRecv(transport.RecvWR{ID: 10, Local: transport.SGE{MR: client.mr, Offset: 8192, Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	seg := rpcrdma.SegmentFields{Handle: client.mr.RKey(), Length: chunk, Offset: client.mr.Addr() + data}
	call := rpcrdma.Append(nil, &rpcrdma.MessageFields{XID: 0x51, Vers: 1, Credits: 32, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg}}})
	call = append(binary.BigEndian.AppendUint32(call, 0x51), 0, 0, 0, 0) // the RPC call's XID and type
	copy(client.mem, call)
	if err := cqp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: client.mr, Length: len(call)}}); err != nil {
		t.Fatal(err)
	}
	tcq := &wcsByID{cq: target.cq}
	if wc := tcq.wait(t, ctx, 1, "the call at the server"); wc.Status != transport.StatusSuccess || !bytes.Equal(target.mem[:wc.ByteLen], call) {
		t.Fatalf("the server's receive: %+v, the call as sent %v", wc, bytes.Equal(target.mem[:wc.ByteLen], call))
	}
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*5 + 1)
	}
	copy(target.mem[256<<10:], want)
	if err := tqp.PostSend(transport.SendWR{ID: 100, Opcode: transport.OpWrite, Signaled: true, Remote: seg.Offset, RKey: seg.Handle,
		Local: transport.SGE{MR: target.mr, Offset: 256 << 10, Length: n}}); err != nil {
		t.Fatal(err)
	}
	if w := tcq.wait(t, ctx, 100, "the server's WRITE"); w.Status != transport.StatusSuccess {
		t.Fatalf("the server's WRITE of the client's memory: %v", w.Status)
	}
	echo := seg
	echo.Length = n
	reply := rpcrdma.Append(nil, &rpcrdma.MessageFields{XID: 0x51, Vers: 1, Credits: 64, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{echo}}})
	reply = append(binary.BigEndian.AppendUint32(reply, 0x51), 0, 0, 0, 1)
	copy(target.mem[512<<10:], reply)
	if err := tqp.PostSend(transport.SendWR{ID: 200, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: target.mr, Offset: 512 << 10, Length: len(reply)}}); err != nil {
		t.Fatal(err)
	}
	if w := tcq.wait(t, ctx, 200, "the reply's SEND"); w.Status != transport.StatusSuccess {
		t.Fatalf("the reply's SEND: %v", w.Status)
	}
	for _, wc := range pollWCs(t, ctx, client.cq, 2, "the client's call and reply") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the client's %+v", wc)
		}
		if wc.ID == 10 && !bytes.Equal(client.mem[8192:8192+wc.ByteLen], reply) {
			t.Error("the reply reached the client changed")
		}
	}
	if !bytes.Equal(client.mem[data:data+n], want) {
		t.Error("the client's write chunk does not hold what the server wrote")
	}

	m, b := scrape(t, base)
	promtool(t, b)
	const lbl = `protocol="nfs",route="r"`
	for name, v := range map[string]float64{
		`rbridge_route_protocol_commands_total{direction="controller_to_host",` + lbl + `}`: 1,
		`rbridge_route_protocol_commands_total{direction="host_to_controller",` + lbl + `}`: 0,
		`rbridge_route_protocol_descriptors_total{` + lbl + `}`:                             1,
		`rbridge_route_protocol_described_bytes_total{` + lbl + `}`:                         chunk,
		`rbridge_route_protocol_completions_total{` + lbl + `}`:                             1,
		`rbridge_route_protocol_errors_total{` + lbl + `,why="unknown_command_id"}`:         0,
		`rbridge_route_staged_messages_total{direction="to_target",route="r"}`:              0,
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Routes) != 1 || st.Routes[0].Protocol != "nfs" {
		t.Errorf("/status routes: %+v, want r with protocol nfs", st.Routes)
	}

	// Not RPC-over-RDMA version 1: refused at the client, counted.
	copy(client.mem, "GET / HTTP/1.1\r\n")
	if err := cqp.PostSend(transport.SendWR{ID: 3, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: client.mr, Length: 16}}); err != nil {
		t.Fatal(err)
	}
	if wc := pollWCs(t, ctx, client.cq, 1, "the refused SEND")[0]; wc.Status != transport.StatusRemInvReqErr {
		t.Errorf("a SEND that is no RPC-over-RDMA message completed %v at the client, want remote invalid request", wc.Status)
	}
	waitUntil(t, "the session ended", func() bool { return g.Sessions() == 0 })
	m, b = scrape(t, base)
	promtool(t, b)
	if got := m[`rbridge_route_protocol_errors_total{`+lbl+`,why="malformed_command"}`]; got != 1 {
		t.Errorf("malformed calls counted: %v, want 1", got)
	}
}
