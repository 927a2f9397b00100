package cm_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce/cm"
)

// FuzzParseCM feeds a MAD to ParseCM and the message parser its attribute
// names: none may panic, and a parsed message re-encodes to the same bytes
// wherever the format has no reserved bits. Run with
//
//	go test ./roce/cm -run '^$' -fuzz FuzzParseCM -fuzztime 30s
func FuzzParseCM(f *testing.F) {
	for _, m := range sampleMADs() {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := cm.ParseCM(b)
		if err != nil {
			return
		}
		hf := h.Fields()
		out := make([]byte, cm.MADHeaderLen)
		cm.MADHeader(out).Encode(&hf)
		in := bytes.Clone(b[:cm.MADHeaderLen])
		in[18], in[19] = 0, 0 // reserved
		if !bytes.Equal(in, out) {
			t.Fatalf("MAD header %x re-encodes as %x", in, out)
		}
		// Each message's fields re-encode into the bytes they came from,
		// reserved bits aside: compare the parse of the re-encoding.
		again := make([]byte, cm.DataLen)
		switch h.AttrID() {
		case cm.AttrREQ:
			r, _, err := cm.ParseREQ(data)
			if err != nil {
				t.Fatal(err)
			}
			f := r.Fields()
			cm.REQ(again).Encode(&f)
			g := cm.REQ(again).Fields()
			if !equalREQ(f, g) {
				t.Fatalf("REQ %+v re-encodes as %+v", f, g)
			}
			if h, _, err := cm.ParseIPCMHeader(r.PrivateData()); err == nil {
				hf := h.Fields()
				o := make([]byte, cm.IPCMHeaderLen)
				cm.IPCMHeader(o).Encode(&hf)
				if hf != cm.IPCMHeader(o).Fields() {
					t.Fatalf("IP CM header %+v re-encodes as %+v", hf, cm.IPCMHeader(o).Fields())
				}
			}
		case cm.AttrREP:
			r, _, _ := cm.ParseREP(data)
			f := r.Fields()
			cm.REP(again).Encode(&f)
			if g := cm.REP(again).Fields(); f.LocalQPN != g.LocalQPN || f.StartingPSN != g.StartingPSN || !bytes.Equal(f.PrivateData, g.PrivateData) ||
				f.RNRRetryCount != g.RNRRetryCount || f.TargetACKDelay != g.TargetACKDelay {
				t.Fatalf("REP %+v re-encodes as %+v", f, g)
			}
		case cm.AttrREJ:
			r, _, _ := cm.ParseREJ(data)
			f := r.Fields()
			cm.REJ(again).Encode(&f)
			if g := cm.REJ(again).Fields(); f.Reason != g.Reason || f.RejectInfoLen != g.RejectInfoLen || !bytes.Equal(f.ARI, g.ARI) {
				t.Fatalf("REJ %+v re-encodes as %+v", f, g)
			}
		case cm.AttrDREQ:
			r, _, _ := cm.ParseDREQ(data)
			f := r.Fields()
			cm.DREQ(again).Encode(&f)
			if g := cm.DREQ(again).Fields(); f.RemoteQPN != g.RemoteQPN || !bytes.Equal(f.PrivateData, g.PrivateData) {
				t.Fatalf("DREQ %+v re-encodes as %+v", f, g)
			}
		case cm.AttrRTU, cm.AttrDREP:
			r, _, _ := cm.ParseRTU(data)
			f := r.Fields()
			cm.RTU(again).Encode(&f)
			if !bytes.Equal(again, data) {
				t.Fatalf("RTU/DREP %x re-encodes as %x", data, again)
			}
		case cm.AttrSIDRREQ:
			r, _, err := cm.ParseSIDRREQ(data)
			if err != nil {
				t.Fatal(err)
			}
			f := r.Fields()
			cm.SIDRREQ(again).Encode(&f)
			if diff := cmp.Diff(f, cm.SIDRREQ(again).Fields()); diff != "" {
				t.Fatalf("SIDR_REQ re-encodes differently (-in +out):\n%s", diff)
			}
			if h, _, err := cm.ParseIPCMHeader(r.PrivateData()); err == nil {
				hf := h.Fields()
				o := make([]byte, cm.IPCMHeaderLen)
				cm.IPCMHeader(o).Encode(&hf)
				if hf != cm.IPCMHeader(o).Fields() {
					t.Fatalf("IP CM header %+v re-encodes as %+v", hf, cm.IPCMHeader(o).Fields())
				}
			}
		case cm.AttrSIDRREP:
			r, _, err := cm.ParseSIDRREP(data)
			if err != nil {
				t.Fatal(err)
			}
			f := r.Fields()
			cm.SIDRREP(again).Encode(&f)
			// No reserved bits: the bytes come back.
			if !bytes.Equal(again, data) {
				t.Fatalf("SIDR_REP %x re-encodes as %x", data, again)
			}
		case cm.AttrMRA:
			r, _, _ := cm.ParseMRA(data)
			f := r.Fields()
			cm.MRA(again).Encode(&f)
			if g := cm.MRA(again).Fields(); f.ServiceTimeout != g.ServiceTimeout || f.MessageMRAed != g.MessageMRAed {
				t.Fatalf("MRA %+v re-encodes as %+v", f, g)
			}
		}
	})
}

func equalREQ(a, b cm.REQFields) bool { return cmp.Equal(a, b) }
