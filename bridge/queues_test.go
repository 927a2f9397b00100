package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGatewayQueues: 8 sessions through a gateway whose two userspace legs
// run 1 and 2 receive loops (queues), WRITEs and READs of every session at
// once, every byte checked. With 2, each loop serves half the sessions'
// QPs, its socket receives packets, and none for another loop's QP: the
// kernel's steering brought each QP's packets to the loop that owns it.
func TestGatewayQueues(t *testing.T) {
	for _, queues := range []int{1, 2} {
		t.Run(fmt.Sprint("queues ", queues), func(t *testing.T) {
			if queues > 1 {
				needs.Root(t, "a reuseport BPF program")
			}
			const sessions, size, rounds = 8, 48 << 10, 3
			client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			ln, err := target.cm.Listen(7471, sessions)
			if err != nil {
				t.Fatal(err)
			}
			y := strings.NewReplacer("127.0.10.", loNet, "QUEUES", fmt.Sprint(queues)).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp, queues: QUEUES}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp, queues: QUEUES}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
`)
			cfg, err := config.Parse("gw.yaml", []byte(y))
			if err != nil {
				t.Fatal(err)
			}
			g := startGateway(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			qps := make([]*transport.QP, sessions)
			tqps := make([]*transport.QP, sessions) // the target's
			gwQueue := make([]int, queues)          // the client-facing leg's QPs, by queue
			for i := range qps {
				var cc, tc *cm.Conn
				cc, tc, qps[i] = dialThrough(t, ctx, client, target, ln, "1:7471")
				tqps[i] = tc.QP()
				gwQueue[roce.QueueOf(cc.RemoteQPN(), queues)]++
			}
			for q, n := range gwQueue {
				if n != sessions/queues {
					t.Errorf("leg a's queue %d serves %d of the %d sessions, want %d: %v", q, n, sessions, sessions/queues, gwQueue)
				}
			}
			src := func(i int) int { return i * 64 << 10 }
			dst := func(i int) int { return 512<<10 + i*64<<10 }
			far := func(i int) int { return 64<<10 + i*64<<10 } // the target's; its receives use the first 8 KiB
			for r := range rounds {
				for i, qp := range qps {
					for k := range size {
						client.mem[src(i)+k] = byte(k*131 + i*7 + r*29 + k>>8)
					}
					for _, b := range [][]byte{target.mem[far(i) : far(i)+size], client.mem[dst(i) : dst(i)+size]} {
						for k := range b {
							b[k] = 0xFF
						}
					}
					// The target's QP lock orders this test's writes of its
					// memory with its device's (the network between them is
					// no edge for the race detector).
					tqps[i].Query()
					if err := qp.PostSend(
						transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Local: transport.SGE{MR: client.mr, Offset: src(i), Length: size},
							Remote: target.mr.Addr() + uint64(far(i)), RKey: target.mr.RKey(), Signaled: true},
						transport.SendWR{ID: uint64(100 + i), Opcode: transport.OpRead, Local: transport.SGE{MR: client.mr, Offset: dst(i), Length: size},
							Remote: target.mr.Addr() + uint64(far(i)), RKey: target.mr.RKey(), Signaled: true}); err != nil {
						t.Fatal(err)
					}
				}
				wcs := make([]transport.WC, 2*sessions)
				for got := 0; got < len(wcs); {
					k, err := client.cq.PollWait(ctx, wcs[got:])
					if err != nil {
						t.Fatalf("round %d: %d of %d completions: %v", r, got, len(wcs), err)
					}
					for _, wc := range wcs[got : got+k] {
						if wc.Status != transport.StatusSuccess {
							t.Fatalf("round %d: completion %+v: %v", r, wc, wc.Status)
						}
					}
					got += k
				}
				for i := range qps {
					tqps[i].Query() // after its device's writes, as above
					want := client.mem[src(i) : src(i)+size]
					if !bytes.Equal(target.mem[far(i):far(i)+size], want) {
						t.Fatalf("round %d, session %d: the target's memory differs from what the client wrote", r, i)
					}
					if !bytes.Equal(client.mem[dst(i):dst(i)+size], want) {
						t.Fatalf("round %d, session %d: what the client read back differs from what it wrote", r, i)
					}
				}
			}
			for _, ls := range g.Status().Legs {
				if len(ls.Queues) != queues {
					t.Fatalf("leg %s: %d queues in its status, want %d (%s)", ls.Name, len(ls.Queues), queues, ls.QueuesWhy)
				}
				for _, q := range ls.Queues {
					want := sessions / queues
					if q.Queue == 0 {
						want++ // the CM's QP 1
					}
					if q.QPs != want || q.RxPackets == 0 || q.TxPackets == 0 || q.RxBytes < uint64(q.RxPackets)*12 {
						t.Errorf("leg %s, queue %d: %+v; want %d QPs and packets both ways", ls.Name, q.Queue, q, want)
					}
					if q.RxForeign != 0 {
						t.Errorf("leg %s, queue %d: %d packets for another loop's QPs reached it: not steered", ls.Name, q.Queue, q.RxForeign)
					}
				}
				t.Logf("leg %s: %+v", ls.Name, ls.Queues)
			}
		})
	}
}
