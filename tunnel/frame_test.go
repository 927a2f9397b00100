package tunnel_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/tunnel"
)

// decoded is a frame read back whole.
type decoded struct {
	Type       tunnel.Type
	Open       *tunnel.OpenFields
	Accept     *tunnel.AcceptFields
	Reject     *tunnel.RejectFields
	Op         *tunnel.OpFields
	Completion *tunnel.CompletionFields
	Close      *tunnel.CloseFields
	Rest       []byte // payload, data or private data
}

// decode reads one frame from r the way an endpoint does: header and
// fixed part, then the variable part.
func decode(r io.Reader) (*decoded, error) {
	buf := make([]byte, tunnel.HeaderLen+tunnel.MaxFixedLen)
	t, fixed, rest, err := tunnel.ReadFrame(r, buf)
	if err != nil {
		return nil, err
	}
	d := &decoded{Type: t}
	body := append([]byte(nil), fixed...)
	if rest > 0 {
		v := make([]byte, rest)
		if _, err := io.ReadFull(r, v); err != nil {
			return nil, fmt.Errorf("variable part: %w", err)
		}
		body = append(body, v...)
		d.Rest = v
	}
	switch t {
	case tunnel.TypeOpen:
		o, err := tunnel.ParseOpen(body)
		if err != nil {
			return nil, err
		}
		f := o.Fields()
		d.Open, d.Rest = &f, nil
	case tunnel.TypeAccept:
		a, err := tunnel.ParseAccept(body)
		if err != nil {
			return nil, err
		}
		f := a.Fields()
		d.Accept, d.Rest = &f, nil
	case tunnel.TypeReject:
		rj, err := tunnel.ParseReject(body)
		if err != nil {
			return nil, err
		}
		f := rj.Fields()
		d.Reject, d.Rest = &f, nil
	case tunnel.TypeOp:
		f, err := tunnel.ParseOp(fixed, len(body))
		if err != nil {
			return nil, err
		}
		d.Op = &f
	case tunnel.TypeCompletion:
		f, err := tunnel.ParseCompletion(fixed, len(body))
		if err != nil {
			return nil, err
		}
		d.Completion = &f
	case tunnel.TypeClose:
		c, err := tunnel.ParseClose(body)
		if err != nil {
			return nil, err
		}
		f := c.Fields()
		d.Close, d.Rest = &f, nil
	}
	return d, nil
}

// frames are one of every kind, as the serializers write them, and what
// reading them back must give.
func frames(t testing.TB) []struct {
	name string
	wire []byte
	want *decoded
} {
	must := func(b []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	payload := bytes.Repeat([]byte{0xA5, 0x5A, 0x01}, 700)
	open := tunnel.OpenFields{Client: netip.MustParseAddrPort("198.18.1.2:40000"), Target: netip.MustParseAddrPort("[2001:db8::7]:4420"),
		RespRes: 16, InitDepth: 4, MaxOps: 256, PrivateData: []byte("hello target")}
	acc := tunnel.AcceptFields{RespRes: 8, InitDepth: 2, MaxOps: 128, PrivateData: []byte{1, 2, 3}}
	rej := tunnel.RejectFields{Reason: 28, PrivateData: []byte("go away")}
	send := tunnel.OpFields{Opcode: transport.OpSendWithImm, ID: 0xFFFFFFFE, Imm: 0xDEADBEEF, Length: uint32(len(payload))}
	write := tunnel.OpFields{Opcode: transport.OpWrite, ID: 7, Remote: 0x7F00112233445566, RKey: 0x1234, Length: 3}
	read := tunnel.OpFields{Opcode: transport.OpRead, ID: 8, Remote: 0x1000, RKey: 0x99, Length: 65536}
	cas := tunnel.OpFields{Opcode: transport.OpCompareSwap, ID: 9, Remote: 0x2000, RKey: 5, Length: 8, Compare: 1, SwapAdd: 2}
	inv := tunnel.OpFields{Opcode: transport.OpSendWithInv, ID: 10, InvRKey: 0xABCD}
	ok := tunnel.CompletionFields{ID: 8, DataLen: 5}
	fail := tunnel.CompletionFields{ID: 9, Status: transport.StatusRemAccessErr}
	atomic := tunnel.CompletionFields{ID: 9, Orig: 0x0102030405060708}
	cl := tunnel.CloseFields{Code: tunnel.CloseFailed, Reason: "the target's QP left RTS"}
	return []struct {
		name string
		wire []byte
		want *decoded
	}{
		{"open", must(open.Append(nil)), &decoded{Type: tunnel.TypeOpen, Open: &open}},
		{"accept", must(acc.Append(nil)), &decoded{Type: tunnel.TypeAccept, Accept: &acc}},
		{"reject", must(rej.Append(nil)), &decoded{Type: tunnel.TypeReject, Reject: &rej}},
		{"send with imm", append(must(send.Append(nil)), payload...), &decoded{Type: tunnel.TypeOp, Op: &send, Rest: payload}},
		{"write", append(must(write.Append(nil)), 1, 2, 3), &decoded{Type: tunnel.TypeOp, Op: &write, Rest: []byte{1, 2, 3}}},
		{"read", must(read.Append(nil)), &decoded{Type: tunnel.TypeOp, Op: &read}},
		{"compare swap", must(cas.Append(nil)), &decoded{Type: tunnel.TypeOp, Op: &cas}},
		{"empty send with inv", must(inv.Append(nil)), &decoded{Type: tunnel.TypeOp, Op: &inv}},
		{"read completion", append(must(ok.Append(nil)), "abcde"...), &decoded{Type: tunnel.TypeCompletion, Completion: &ok, Rest: []byte("abcde")}},
		{"failed completion", must(fail.Append(nil)), &decoded{Type: tunnel.TypeCompletion, Completion: &fail}},
		{"atomic completion", must(atomic.Append(nil)), &decoded{Type: tunnel.TypeCompletion, Completion: &atomic}},
		{"close", cl.Append(nil), &decoded{Type: tunnel.TypeClose, Close: &cl}},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range frames(t) {
		t.Run(f.name, func(t *testing.T) {
			r := bytes.NewReader(f.wire)
			got, err := decode(r)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if diff := cmp.Diff(f.want, got, cmpopts.EquateComparable(netip.AddrPort{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			if r.Len() != 0 {
				t.Errorf("%d bytes left after the frame", r.Len())
			}
		})
	}
}

// TestFramesInAStream reads every frame back from one stream.
func TestFramesInAStream(t *testing.T) {
	var all []byte
	fs := frames(t)
	for _, f := range fs {
		all = append(all, f.wire...)
	}
	r := bytes.NewReader(all)
	for _, f := range fs {
		got, err := decode(r)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if got.Type != f.want.Type {
			t.Fatalf("%s: type %v, want %v", f.name, got.Type, f.want.Type)
		}
	}
	if _, err := decode(r); !errors.Is(err, io.EOF) {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

// TestFramePrefixCut cuts every frame at every length: an error, never a
// panic, never a frame.
func TestFramePrefixCut(t *testing.T) {
	for _, f := range frames(t) {
		for n := 0; n < len(f.wire); n++ {
			if got, err := decode(bytes.NewReader(f.wire[:n])); err == nil {
				t.Fatalf("%s cut at %d of %d: decoded %+v", f.name, n, len(f.wire), got)
			}
		}
	}
}

func TestFrameBad(t *testing.T) {
	hdr := func(typ byte, n uint32) []byte {
		return []byte{typ, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	op := func(mod func(b []byte)) []byte {
		f := tunnel.OpFields{Opcode: transport.OpWrite, ID: 1, Length: 4}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, 1, 2, 3, 4)
		mod(b)
		return b
	}
	comp := func(mod func(b []byte)) []byte {
		f := tunnel.CompletionFields{ID: 1}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		mod(b)
		return b
	}
	for _, tc := range []struct {
		name, want string
		wire       []byte
	}{
		{"unknown type", "unknown frame type 9", append(hdr(9, 4), 0, 0, 0, 0)},
		{"type zero", "unknown frame type 0", hdr(0, 0)},
		{"body shorter than fixed", "Op frame: body of 10 bytes", append(hdr(4, 10), make([]byte, 10)...)},
		{"body too long", "Close frame: body of 1000 bytes", append(hdr(6, 1000), make([]byte, 1000)...)},
		{"opcode not RC only", "opcode 0x06", op(func(b []byte) { b[8] = 0x06 })},
		{"opcode UD", "opcode 0x64", op(func(b []byte) { b[8] = 0x64 })},
		{"payload shorter than length", "in a body of 60 bytes, want 61", op(func(b []byte) { b[8+28+3] = 5 })},
		{"read with payload", "RDMA_READ of length 4 in a body of 60 bytes, want 56", op(func(b []byte) { b[8] = 0x0c })},
		{"atomic not 8", "ATOMIC_FETCH_AND_ADD of 4 bytes, want 8", op(func(b []byte) { b[8] = 0x14 })},
		{"status not a NAK code", "status 7", comp(func(b []byte) { b[8+4] = 7 })},
		{"failure with data", "with 2 bytes of data", append(comp(func(b []byte) { b[8+4] = 2; b[7] = 18 }), 0, 0)},
		{"close code", "code 2", append(hdr(6, 4), 2, 0, 0, 0)},
		{"close reason not utf-8", "not UTF-8", append(hdr(6, 6), 0, 0, 0, 0, 0xff, 0xfe)},
		{"open without target", "target [::]:0 is not an address", append(hdr(1, 44), make([]byte, 44)...)},
		{"accept window 0", "a window of 0", append(hdr(2, 8), make([]byte, 8)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(bytes.NewReader(tc.wire))
			if err == nil {
				t.Fatalf("decoded %+v, want an error", got)
			}
			if !errors.Is(err, tunnel.ErrFrame) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %v does not match ErrFrame", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestFrameAppendRefuses(t *testing.T) {
	big := make([]byte, tunnel.MaxPrivateData+1)
	for _, tc := range []struct {
		name string
		f    func() ([]byte, error)
	}{
		{"open private data", func() ([]byte, error) {
			f := tunnel.OpenFields{Target: netip.MustParseAddrPort("10.0.0.1:1"), MaxOps: 1, PrivateData: big}
			return f.Append(nil)
		}},
		{"open no target", func() ([]byte, error) { f := tunnel.OpenFields{MaxOps: 1}; return f.Append(nil) }},
		{"open no window", func() ([]byte, error) {
			f := tunnel.OpenFields{Target: netip.MustParseAddrPort("10.0.0.1:1")}
			return f.Append(nil)
		}},
		{"accept private data", func() ([]byte, error) { f := tunnel.AcceptFields{MaxOps: 1, PrivateData: big}; return f.Append(nil) }},
		{"accept no window", func() ([]byte, error) { f := tunnel.AcceptFields{}; return f.Append(nil) }},
		{"reject private data", func() ([]byte, error) { f := tunnel.RejectFields{PrivateData: big}; return f.Append(nil) }},
		{"op opcode", func() ([]byte, error) { f := tunnel.OpFields{Opcode: transport.OpRecv}; return f.Append(nil) }},
		{"op too long", func() ([]byte, error) {
			f := tunnel.OpFields{Opcode: transport.OpSend, Length: tunnel.MaxPayload + 1}
			return f.Append(nil)
		}},
		{"completion data on failure", func() ([]byte, error) {
			f := tunnel.CompletionFields{Status: transport.StatusRemOpErr, DataLen: 1}
			return f.Append(nil)
		}},
		{"completion negative data", func() ([]byte, error) { f := tunnel.CompletionFields{DataLen: -1}; return f.Append(nil) }},
	} {
		if b, err := tc.f(); err == nil || !errors.Is(err, tunnel.ErrFrame) || len(b) != 0 {
			t.Errorf("%s: appended %d bytes, err %v; want nothing and an ErrFrame", tc.name, len(b), err)
		}
	}
	long := tunnel.CloseFields{Reason: strings.Repeat("é", tunnel.MaxReason)}
	got, err := decode(bytes.NewReader(long.Append(nil)))
	if err != nil {
		t.Fatalf("a long reason: %v", err)
	}
	if n := len(got.Close.Reason); n > tunnel.MaxReason || n < tunnel.MaxReason-1 {
		t.Errorf("a long reason cut to %d bytes, want about %d", n, tunnel.MaxReason)
	}
}

// TestFrameStatuses maps every failure status through the wire: what the
// requester sees is transport's one table's answer.
func TestFrameStatuses(t *testing.T) {
	for s := transport.StatusSuccess; s <= transport.StatusRNRRetryExcErr; s++ {
		f := tunnel.CompletionFields{ID: 3, Status: s}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		want := transport.StatusSuccess
		if s != transport.StatusSuccess {
			want = transport.NAKStatus(transport.NAKCode(s))
		}
		if got.Completion.Status != want {
			t.Errorf("%v crossed as %v, want %v", s, got.Completion.Status, want)
		}
	}
}

// TestFrameAppendsAfter checks that serializers append and write every
// byte they claim (the buffer is pre-filled with 0xFF).
func TestFrameAppendsAfter(t *testing.T) {
	for _, f := range frames(t) {
		pre := bytes.Repeat([]byte{0xFF}, 5)
		b := append(pre[:5:5], f.wire...)
		if !bytes.Equal(b[5:], f.wire) || !bytes.Equal(b[:5], []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}) {
			t.Fatalf("%s: prefix disturbed", f.name)
		}
	}
	open := tunnel.OpenFields{Target: netip.MustParseAddrPort("10.1.2.3:9"), MaxOps: 2}
	b := bytes.Repeat([]byte{0xFF}, 100)[:3]
	b, err := open.Append(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:3], []byte{0xFF, 0xFF, 0xFF}) {
		t.Errorf("Append overwrote the buffer's bytes")
	}
	got, err := decode(bytes.NewReader(b[3:]))
	if err != nil {
		t.Fatal(err)
	}
	if got.Open.Client.IsValid() && got.Open.Client.Addr().IsValid() && !got.Open.Client.Addr().IsUnspecified() {
		t.Errorf("no client given, read back %v", got.Open.Client)
	}
}

func TestReadMessage(t *testing.T) {
	rej := tunnel.RejectFields{Reason: 8, PrivateData: []byte("no route")}
	b, err := rej.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	typ, body, err := tunnel.ReadMessage(bytes.NewReader(b), tunnel.TypeAccept, tunnel.TypeReject)
	if err != nil || typ != tunnel.TypeReject {
		t.Fatalf("ReadMessage: %v %v", typ, err)
	}
	r, err := tunnel.ParseReject(body)
	if err != nil || r.Fields().Reason != 8 || string(r.Fields().PrivateData) != "no route" {
		t.Fatalf("the Reject read back: %+v, %v", r.Fields(), err)
	}
	if _, _, err := tunnel.ReadMessage(bytes.NewReader(b), tunnel.TypeOpen); !errors.Is(err, tunnel.ErrFrame) || !strings.Contains(err.Error(), "a Reject frame, want one of [Open]") {
		t.Errorf("a Reject where an Open must come: %v", err)
	}
	for n := range len(b) {
		if _, _, err := tunnel.ReadMessage(bytes.NewReader(b[:n]), tunnel.TypeReject); err == nil {
			t.Fatalf("cut at %d of %d: no error", n, len(b))
		}
	}
}
