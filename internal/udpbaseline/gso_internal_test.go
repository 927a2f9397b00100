//go:build linux

package udpbaseline

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestWindowWaitsGSO: with GSO the window holds the same datagrams as
// without, each call's in one send.
func TestWindowWaitsGSO(t *testing.T) {
	c := newFakeConn()
	c.dgram = 64
	f, _ := fakeFlowOffload(t, Options{Size: 64, Datagram: 64, Window: 8, StallTimeout: time.Hour}, c, udpconn.Offload{GSO: true})
	done := make(chan error)
	go func() { done <- f.Send(context.Background(), 20) }()
	if n := <-c.wrote; n != 8 {
		t.Fatalf("first call: %d datagrams, want the window of 8", n)
	}
	c.release <- 3
	if n := <-c.wrote; n != 11 {
		t.Fatalf("after 3 arrived: %d sent, want 11", n)
	}
	c.release <- 11
	<-c.wrote
	c.release <- 8
	<-c.wrote
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if want := []int{8, 3, 8, 1}; !slices.Equal(c.calls, want) {
		t.Errorf("datagrams a call %v, want %v", c.calls, want)
	}
	if want := []int{1, 1, 1, 1}; !slices.Equal(c.sends, want) {
		t.Errorf("sends a call %v, want %v", c.sends, want)
	}
}

// TestGSORefusedFlow: a GSO send the kernel refuses with EIO turns GSO off
// for the flow, which says why and sends the same datagrams one a send.
func TestGSORefusedFlow(t *testing.T) {
	c := newFakeConn()
	c.dgram, c.refuseGSO = 64, true
	f, _ := fakeFlowOffload(t, Options{Size: 64, Datagram: 64, Window: 64, StallTimeout: time.Hour}, c, udpconn.Offload{GSO: true})
	if err := f.Send(context.Background(), 20); err != nil {
		t.Fatal(err)
	}
	if n := <-c.wrote; n != 20 {
		t.Fatalf("%d datagrams sent, want 20", n)
	}
	c.mu.Lock()
	refused, sends := c.refused, slices.Clone(c.sends)
	c.mu.Unlock()
	if refused != 1 || !slices.Equal(sends, []int{20}) {
		t.Errorf("%d GSO sends refused, then sends %v; want 1, then [20]: the test proved nothing", refused, sends)
	}
	if o := f.Offload(); o.GSO || !strings.Contains(o.NoGSO, "EIO") {
		t.Errorf("Offload after EIO: %v", o)
	}
}
