package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDemo(t *testing.T) {
	t.Run("gateway", func(t *testing.T) { testDemo(t, false, false) })
	t.Run("tunnel", func(t *testing.T) { testDemo(t, true, false) })
	t.Run("busy-poll", func(t *testing.T) { testDemo(t, false, true) })
}

func testDemo(t *testing.T, tunnel, busyPoll bool) {
	var out, errs bytes.Buffer
	o := demoOptions{addr: "127.0.0.1", size: 4096, duration: 50 * time.Millisecond, jsonOut: true, tunnel: tunnel, busyPoll: busyPoll}
	if err := runDemo(context.Background(), o, &out, &errs); err != nil {
		t.Fatalf("demo: %v\n%s", err, errs.String())
	}
	if bytes.Contains(out.Bytes(), []byte(`\u003e`)) || !bytes.Contains(out.Bytes(), []byte("client -> target")) {
		t.Errorf("the JSON escapes -> (want it as written):\n%s", out.String())
	}
	var r demoReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("demo's JSON: %v\n%s", err, out.String())
	}
	want := []string{"SEND", "SEND_WITH_IMM", "SEND_WITH_INV", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ",
		"ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP", "SEND_WITH_IMM"}
	if len(r.Crossed) != len(want) {
		t.Fatalf("%d operations crossed, want %d: %+v", len(r.Crossed), len(want), r.Crossed)
	}
	for i, c := range r.Crossed {
		if c.Op != want[i] || !strings.HasPrefix(c.Result, "ok") {
			t.Errorf("crossing %d: %+v, want %s ok", i, c, want[i])
		}
	}
	if r.Crossed[len(want)-1].Way != "target -> client" {
		t.Errorf("the last crossing went %q, want back from the target", r.Crossed[len(want)-1].Way)
	}
	// The session counted what crossed: eight client ops (a long WRITE as
	// chunks counts more), one back.
	if r.Session.Ops[0] < 8 || r.Session.Ops[1] != 1 {
		t.Errorf("session counted %v ops", r.Session.Ops)
	}
	for _, run := range []demoRun{r.Direct, r.Through} {
		if run.Writes == 0 || run.MBPerS <= 0 || run.RoundTrip <= 0 || run.WriteCPU <= 0 || run.CPUsBusy <= 0 {
			t.Errorf("%s: %+v: nothing measured", run.Path, run)
		}
	}
	if r.BWRatio <= 0 || r.LatRatio <= 0 || r.CPURatio <= 0 {
		t.Errorf("ratios %v %v %v", r.BWRatio, r.LatRatio, r.CPURatio)
	}
	if (r.Tunnel != "") != tunnel {
		t.Errorf("tunnel %q with --tunnel %v", r.Tunnel, tunnel)
	}
	if (r.BusyPoll != "") != busyPoll {
		t.Errorf("busy_poll %q with --busy-poll %v", r.BusyPoll, busyPoll)
	}
	if errs.Len() > 0 {
		t.Errorf("the demo logged: %s", errs.String())
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--addr", "10.0.0.1"}, {"--addr", "nonsense"}, {"--size", "0"}, {"--duration", "1ns"}, {"--busy-poll", "--tunnel"}} {
		_, _, err := run(t, nil, append([]string{"demo"}, args...)...)
		if err == nil {
			t.Errorf("demo %v: no error", args)
		}
	}
}
