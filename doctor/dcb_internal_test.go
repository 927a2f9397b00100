package doctor

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// attr appends a netlink attribute.
func attr(b []byte, typ uint16, v []byte) []byte {
	h := make([]byte, nlaHdrLen)
	binary.NativeEndian.PutUint16(h[0:], uint16(nlaHdrLen+len(v)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(append(b, h...), v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// message wraps a body in a netlink header of the given type.
func message(typ uint16, body []byte) []byte {
	b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	return append(b, body...)
}

// dcbReply is what the kernel answers for a NIC with PFC on priority 3
// and DSCP 26 and 48 trusted onto priorities 3 and 6 (an ETS attribute
// and a PCP APP entry beside them, which the parser passes over).
func dcbReply() []byte {
	pfc := make([]byte, 4+8*8*2) // struct ieee_pfc
	pfc[0], pfc[1] = 8, 1<<3
	app := func(sel, prio uint8, proto uint16) []byte {
		v := []byte{sel, prio, 0, 0}
		binary.NativeEndian.PutUint16(v[2:], proto)
		return v
	}
	var apps []byte
	apps = attr(apps, dcbAttrIEEEApp, app(dcbAppSelDSCP, 3, 26))
	apps = attr(apps, dcbAttrIEEEApp, app(dcbAppSelDSCP, 6, 48))
	apps = attr(apps, dcbAttrIEEEApp, app(1, 3, 0x8915)) // ethertype selector: RoCE v1
	var ieee []byte
	ieee = attr(ieee, 1, make([]byte, 59)) // DCB_ATTR_IEEE_ETS
	ieee = attr(ieee, dcbAttrIEEEPFC, pfc)
	ieee = attr(ieee, dcbAttrIEEEApps|0x8000, apps) // NLA_F_NESTED set, as some kernels do
	body := []byte{syscall.AF_UNSPEC, dcbCmdIEEEGet, 0, 0}
	body = attr(body, dcbAttrIfname, []byte("eth0\x00"))
	body = attr(body, dcbAttrIEEE, ieee)
	return message(rtmGetDCB, body)
}

func TestParseDCBReply(t *testing.T) {
	got, err := parseDCBReply(dcbReply())
	if err != nil {
		t.Fatal(err)
	}
	want := DCB{PFCCap: 8, PFCEnabled: 1 << 3, DSCP: map[uint8]uint8{26: 3, 48: 6}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestParseDCBReplyErrors(t *testing.T) {
	errMsg := func(errno syscall.Errno) []byte {
		b := make([]byte, 4+nlmsgHdrLen)
		binary.NativeEndian.PutUint32(b, uint32(-int32(errno)))
		return message(nlmsgError, b)
	}
	if _, err := parseDCBReply(errMsg(syscall.EOPNOTSUPP)); !errors.Is(err, ErrNotExposed) {
		t.Errorf("EOPNOTSUPP: %v, want ErrNotExposed", err)
	}
	if _, err := parseDCBReply(errMsg(syscall.ENODEV)); !errors.Is(err, syscall.ENODEV) || errors.Is(err, ErrNotExposed) {
		t.Errorf("ENODEV: %v, want ENODEV", err)
	}
	if _, err := parseDCBReply(message(rtmGetDCB, []byte{0, dcbCmdIEEEGet, 0, 0})); !errors.Is(err, ErrNotExposed) {
		t.Errorf("a reply without DCB_ATTR_IEEE: %v, want ErrNotExposed", err)
	}
	if _, err := parseDCBReply(message(16, []byte{0, 0, 0, 0})); err == nil {
		t.Error("a message of another type parsed")
	}
}

// TestParseDCBReplyCut: every prefix of a reply (a datagram cut short) is
// an error, never a panic.
func TestParseDCBReplyCut(t *testing.T) {
	b := dcbReply()
	for n := range len(b) {
		if _, err := parseDCBReply(b[:n]); err == nil {
			t.Errorf("cut at %d of %d bytes: no error", n, len(b))
		}
	}
}

func TestDCBRequest(t *testing.T) {
	b := dcbRequest("eth0", 7)
	if got := binary.NativeEndian.Uint32(b); int(got) != len(b) || len(b)%4 != 0 {
		t.Errorf("length field %d, message %d bytes", got, len(b))
	}
	if typ, seq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:]); typ != rtmGetDCB || seq != 7 {
		t.Errorf("type %d seq %d", typ, seq)
	}
	var name string
	if err := attrs(b[nlmsgHdrLen+dcbmsgLen:], func(typ uint16, v []byte) error {
		if typ == dcbAttrIfname {
			name = string(v)
		}
		return nil
	}); err != nil || name != "eth0\x00" {
		t.Errorf("ifname attribute %q, %v", name, err)
	}
}

func FuzzParseDCBReply(f *testing.F) {
	f.Add(dcbReply())
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseDCBReply(b)
	})
}
