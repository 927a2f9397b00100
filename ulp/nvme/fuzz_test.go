package nvme_test

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// Fuzz targets, seeded from the encoders and the vectors. Run one with
//   go test ./ulp/nvme -run '^$' -fuzz FuzzCapsule -fuzztime 30s

func capsuleSeeds(f *testing.F) {
	for _, b := range [][]byte{
		linuxRead4K, linuxKeepAlive, spdkKeyedList,
		append(bytes.Clone(linuxIOConnectSQE), linuxConnectData()...),
		capsule(f, nvme.OpWrite, keyed(0x1000, nvme.MaxKeyedLength, 7, nvme.SGLInvalidate), nil),
		inlineCapsule(f, nvme.OpWrite, make([]byte, 512)),
		listCapsule(f, nvme.OpRead, keyed(1, 2, 3, 0), keyed(4, 5, 6, 0xf), keyed(7, 8, 9, 0)),
	} {
		f.Add(b)
	}
}

// FuzzCapsule parses arbitrary capsules: no panic; an accepted capsule's
// keyed descriptors lie inside it, rewriting them changes nothing else
// and the rewritten capsule parses the same way.
func FuzzCapsule(f *testing.F) {
	capsuleSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := nvme.ParseCapsule(b)
		if err != nil {
			return
		}
		switch c.Kind() {
		case nvme.DataKeyed:
			if c.Keyed().Len() != 1 || c.InCapsuleData() != nil {
				t.Fatalf("keyed: %d descriptors, %d data bytes", c.Keyed().Len(), len(c.InCapsuleData()))
			}
		case nvme.DataKeyedList:
			if c.Keyed().Len() < 1 || c.Keyed().Len()*nvme.SGLLen+nvme.CommandLen > len(b) {
				t.Fatalf("list of %d descriptors in %d bytes", c.Keyed().Len(), len(b))
			}
		case nvme.DataInCapsule:
			if c.Keyed().Len() != 0 || uint32(len(c.InCapsuleData())) != c.Command().DataPointer().Length() {
				t.Fatalf("in-capsule: %d data bytes, pointer says %d", len(c.InCapsuleData()), c.Command().DataPointer().Length())
			}
		default:
			t.Fatalf("kind %v", c.Kind())
		}
		orig := bytes.Clone(b)
		n := c.Keyed().Len()
		for i, d := range c.Keyed().All() {
			if !d.IsKeyed() || len(d) != nvme.SGLLen {
				t.Fatalf("descriptor %d: %v", i, d)
			}
			d.SetAddress(0xa5a5a5a5a5a5a5a5)
			d.SetKey(0x5a5a5a5a)
			d.SetLength(0x123456)
			d.SetSubtype(nvme.SGLAddress)
		}
		changed := 0
		for i := range b {
			if b[i] != orig[i] {
				changed++
			}
		}
		if changed > n*nvme.SGLLen {
			t.Fatalf("rewriting %d descriptors changed %d bytes", n, changed)
		}
		c2, err := nvme.ParseCapsule(b)
		if err != nil || c2.Kind() != c.Kind() || c2.Keyed().Len() != n {
			t.Fatalf("rewritten capsule: %v, kind %v, %d descriptors", err, c2.Kind(), c2.Keyed().Len())
		}
		for _, d := range c2.Keyed().All() {
			if d.Address() != 0xa5a5a5a5a5a5a5a5 || d.Key() != 0x5a5a5a5a || d.Length() != 0x123456 || d.Subtype() != nvme.SGLAddress {
				t.Fatalf("rewrite did not stick: %v", d)
			}
		}
	})
}

// FuzzSGL decodes arbitrary descriptors: a decoded descriptor encodes back
// to the same bytes, reserved bytes aside.
func FuzzSGL(f *testing.F) {
	for _, d := range []nvme.SGLFields{
		keyed(0x1000, 4096, 0x1234, nvme.SGLInvalidate),
		{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: 1024},
		{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: 32},
	} {
		b := make([]byte, nvme.SGLLen)
		nvme.SGL(b).Encode(&d)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, n, err := nvme.ParseSGL(b)
		if err != nil {
			return
		}
		fields := s.Fields()
		out := filled(nvme.SGLLen)
		nvme.SGL(out).Encode(&fields)
		in := bytes.Clone(b[:n])
		if !s.IsKeyed() {
			clear(in[12:15]) // reserved
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("SGL %x re-encodes as %x", in, out)
		}
	})
}

// FuzzCommand decodes arbitrary SQEs as commands and as Connects.
func FuzzCommand(f *testing.F) {
	f.Add(linuxRead4K)
	f.Add(linuxKeepAlive)
	f.Add(linuxIOConnectSQE)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, n, err := nvme.ParseCommand(b)
		if err != nil {
			return
		}
		fields := c.Fields()
		out := filled(nvme.CommandLen)
		nvme.Command(out).Encode(&fields)
		in := bytes.Clone(b[:n])
		if !c.DataPointer().IsKeyed() {
			clear(in[36:39]) // the data pointer's reserved bytes
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("command %x re-encodes as %x", in, out)
		}
		_ = c.Direction()
		con, n, err := nvme.ParseConnect(b)
		if err != nil {
			return
		}
		cf := con.Fields()
		out = filled(nvme.CommandLen)
		nvme.Connect(out).Encode(&cf)
		for _, r := range [][2]int{{5, 24}, {47, 48}, {52, 64}} {
			clear(in[r[0]:r[1]]) // reserved
		}
		if n != nvme.CommandLen || !bytes.Equal(in, out) {
			t.Fatalf("connect %x re-encodes as %x", in, out)
		}
	})
}

// FuzzCompletion decodes arbitrary CQEs: every bit round-trips.
func FuzzCompletion(f *testing.F) {
	b := make([]byte, nvme.CompletionLen)
	nvme.Completion(b).Encode(&nvme.CompletionFields{DW0: 1, SQHead: 2, CommandID: 3,
		Status: nvme.StatusConnectInvalidParam | nvme.StatusDNR, Phase: true})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, n, err := nvme.ParseCompletion(b)
		if err != nil {
			return
		}
		fields := c.Fields()
		out := filled(nvme.CompletionLen)
		nvme.Completion(out).Encode(&fields)
		if !bytes.Equal(b[:n], out) {
			t.Fatalf("completion %x re-encodes as %x", b[:n], out)
		}
		_ = c.Status().String()
	})
}

// FuzzConnectData decodes arbitrary Connect data: the fields read back
// the same after encoding.
func FuzzConnectData(f *testing.F) {
	f.Add(linuxConnectData())
	f.Fuzz(func(t *testing.T, b []byte) {
		d, _, err := nvme.ParseConnectData(b)
		if err != nil {
			return
		}
		fields := d.Fields()
		out := filled(nvme.ConnectDataLen)
		if err := nvme.ConnectData(out).Encode(&fields); err != nil {
			t.Fatalf("fields read from connect data do not encode: %v", err)
		}
		if got := nvme.ConnectData(out).Fields(); got != fields {
			t.Fatalf("connect data %+v reads back as %+v", fields, got)
		}
	})
}

// FuzzCMPrivateData decodes arbitrary rdma_cm private data as each of the
// three structures.
func FuzzCMPrivateData(f *testing.F) {
	f.Add(nvme.AppendCMRequest(nil, &nvme.CMRequestFields{QID: 1, HRQSize: 128, HSQSize: 127}))
	f.Add(nvme.AppendCMReply(nil, &nvme.CMReplyFields{CRQSize: 128}))
	f.Add(nvme.AppendCMReject(nil, &nvme.CMRejectFields{Status: nvme.CMNoResources}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, n, err := nvme.ParseCMRequest(b); err == nil {
			fields := r.Fields()
			in := bytes.Clone(b[:n])
			clear(in[10:])
			if out := nvme.AppendCMRequest(nil, &fields); !bytes.Equal(in, out) {
				t.Fatalf("request %x re-encodes as %x", in, out)
			}
		}
		if r, n, err := nvme.ParseCMReply(b); err == nil {
			fields := r.Fields()
			in := bytes.Clone(b[:n])
			clear(in[4:])
			if out := nvme.AppendCMReply(nil, &fields); !bytes.Equal(in, out) {
				t.Fatalf("reply %x re-encodes as %x", in, out)
			}
		}
		if r, n, err := nvme.ParseCMReject(b); err == nil {
			fields := r.Fields()
			if out := nvme.AppendCMReject(nil, &fields); !bytes.Equal(b[:n], out) {
				t.Fatalf("reject %x re-encodes as %x", b[:n], out)
			}
			_ = r.Status().String()
		}
	})
}
