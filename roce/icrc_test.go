package roce_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"sync"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

// scapyFrame is an RC_SEND_ONLY of "hello world!" built by scapy 2.5's
// contrib/roce.py (Ether/IP(tos=2, id=7, DF)/UDP/BTH(dqpn=0x11, psn=5,
// ackreq=1)/Raw), whose ICRC scapy computed.
const scapyFrame = "02000000000202000000000108004502003800074000401126aa0a0000010a000002" +
	"c00012b70024ef40" + "0400ffff000000118000000568656c6c6f20776f726c6421" + "8b118893"

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestICRCScapyVector(t *testing.T) {
	frame := mustHex(t, scapyFrame)
	crc, err := roce.ICRC(frame[14:])
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(frame[len(frame)-4:]); got != crc {
		t.Errorf("ICRC = %#08x, scapy put %#08x", crc, got)
	}
	if _, err := roce.VerifyICRC(frame[14:]); err != nil {
		t.Errorf("VerifyICRC: %v", err)
	}
}

// TestICRCSeed checks the kernel's seed: 0xdebb20e3 is the raw CRC state
// after eight 0xFF bytes (rxe_icrc.c).
func TestICRCSeed(t *testing.T) {
	if got := ^crc32.ChecksumIEEE(bytes.Repeat([]byte{0xff}, 8)); got != 0xdebb20e3 {
		t.Errorf("state after 8 x 0xFF = %#x, want 0xdebb20e3", got)
	}
}

// TestICRCReference compares ICRC against a direct construction of the
// masked pseudo-packet summed with hash/crc32, over every sample opcode, for
// IPv4 and IPv6.
func TestICRCReference(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			frame := buildFrame(t, s, v6)
			ip := frame[14:]
			got, err := roce.ICRC(ip)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if want := referenceICRC(ip, v6); got != want {
				t.Errorf("%s v6=%v: ICRC %#08x, reference %#08x", s.name, v6, got, want)
			}
			if _, err := roce.VerifyICRC(ip); err != nil {
				t.Errorf("%s v6=%v: serialized packet fails verification: %v", s.name, v6, err)
			}
		}
	}
}

func referenceICRC(ip []byte, v6 bool) uint32 {
	m := append(bytes.Repeat([]byte{0xff}, 8), ip[:len(ip)-4]...)
	h := m[8:]
	hl := 20
	if v6 {
		hl = 40
		h[0] |= 0x0f
		h[1], h[2], h[3] = 0xff, 0xff, 0xff
		h[7] = 0xff
	} else {
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
	}
	h[hl+6], h[hl+7] = 0xff, 0xff
	h[hl+8+4] = 0xff
	return crc32.ChecksumIEEE(m)
}

// TestICRCMasking: the fields routers rewrite do not change the ICRC; any
// other byte does.
func TestICRCMasking(t *testing.T) {
	s := samples()[4] // RC_SEND_ONLY
	for _, v6 := range []bool{false, true} {
		ip := buildFrame(t, s, v6)[14:]
		want, _ := roce.ICRC(ip)
		hl := 20
		masked := []int{1, 8, 10, 11}
		if v6 {
			hl = 40
			masked = []int{1, 2, 3, 7}
		}
		masked = append(masked, hl+6, hl+7, hl+8+4)
		for i := range len(ip) - 4 {
			b := bytes.Clone(ip)
			b[i] ^= 0x5a
			if i == 0 && v6 {
				b[i] = ip[i] ^ 0x05 // traffic class nibble only: version must stay 6
			}
			if i == 0 && !v6 {
				continue // the version and header length are structural
			}
			got, err := roce.ICRC(b)
			isMasked := false
			for _, m := range masked {
				isMasked = isMasked || m == i || (v6 && i == 0)
			}
			switch {
			case err != nil:
				// Changing a length or protocol byte can make the packet
				// unparseable: that is fine, as long as it is an error.
			case isMasked && got != want:
				t.Errorf("v6=%v: changing masked byte %d changed the ICRC", v6, i)
			case !isMasked && got == want:
				t.Errorf("v6=%v: changing byte %d did not change the ICRC", v6, i)
			}
		}
	}
}

func TestICRCErrors(t *testing.T) {
	ip := buildFrame(t, samples()[4], false)[14:]
	bad := bytes.Clone(ip)
	bad[len(bad)-5] ^= 1
	if _, err := roce.VerifyICRC(bad); !errors.Is(err, roce.ErrBadICRC) {
		t.Errorf("corrupted payload: got %v, want ErrBadICRC", err)
	}
	notUDP := bytes.Clone(ip)
	notUDP[9] = 6
	if _, err := roce.ICRC(notUDP); !errors.Is(err, roce.ErrNotRoCEv2) {
		t.Errorf("TCP packet: got %v, want ErrNotRoCEv2", err)
	}
	for i := range 20 + 8 + 12 + 4 {
		if _, err := roce.ICRC(ip[:i]); err == nil {
			t.Errorf("ICRC of %d-byte prefix: no error", i)
		}
	}
	// PutICRC fixes a wrong trailer.
	if err := roce.PutICRC(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := roce.VerifyICRC(bad); err != nil {
		t.Errorf("after PutICRC: %v", err)
	}
}

func TestICRCDoesNotAllocate(t *testing.T) {
	ip := buildFrame(t, samples()[4], true)[14:]
	if n := testing.AllocsPerRun(100, func() { _, _ = roce.VerifyICRC(ip) }); n != 0 {
		t.Errorf("VerifyICRC allocates %.1f times, want 0", n)
	}
}

// TestICRCReadOnly checks that VerifyICRC and PutICRC leave every byte but
// the trailer as they found it, and agree with ICRC; and that goroutines may
// verify one packet at once (run with -race).
func TestICRCReadOnly(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			ip := buildFrame(t, s, v6)[14:]
			orig := bytes.Clone(ip)
			want, _ := roce.ICRC(ip)
			got, err := roce.VerifyICRC(ip)
			if err != nil || got != want {
				t.Errorf("%s v6=%v: VerifyICRC = %#x, %v; ICRC %#x", s.name, v6, got, err, want)
			}
			if !bytes.Equal(ip, orig) {
				t.Errorf("%s v6=%v: VerifyICRC changed the packet", s.name, v6)
			}
			binary.LittleEndian.PutUint32(ip[len(ip)-4:], 0)
			if err := roce.PutICRC(ip); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ip, orig) {
				t.Errorf("%s v6=%v: PutICRC result differs from the serializer's packet", s.name, v6)
			}
		}
	}
	ip := buildFrame(t, samples()[4], true)[14:]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				if _, err := roce.VerifyICRC(ip); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestICRCWithHeaders(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		ip := buildFrame(t, samples()[10], v6)[14:]
		hl := 20 + 8
		if v6 {
			hl = 40 + 8
		}
		want, _ := roce.ICRC(ip)
		got, err := roce.ICRCWithHeaders(ip[:hl], ip[hl:])
		if err != nil || got != want {
			t.Errorf("v6=%v: ICRCWithHeaders = %#x, %v; ICRC %#x", v6, got, err, want)
		}
		if _, err := roce.ICRCWithHeaders(ip[:hl-1], ip[hl:]); err == nil {
			t.Errorf("v6=%v: short headers accepted", v6)
		}
	}
}
