package capture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// LinkType is a capture's link-layer header type (LINKTYPE_* of the
// tcpdump.org registry).
type LinkType uint32

// Link types Decode reads.
const (
	LinkTypeEthernet LinkType = 1
	LinkTypeRawBSD   LinkType = 12  // DLT_RAW on OpenBSD-derived systems
	LinkTypeRawAlt   LinkType = 14  // DLT_RAW on some BSDs
	LinkTypeRaw      LinkType = 101 // LINKTYPE_RAW: an IPv4 or IPv6 packet
	LinkTypeLinuxSLL LinkType = 113 // Linux cooked capture
	LinkTypeIPv4     LinkType = 228
	LinkTypeIPv6     LinkType = 229
)

// Packet is one packet of a capture.
type Packet struct {
	Data     []byte    // the bytes the capture kept
	Length   int       // the packet's length on the wire, at least len(Data)
	Time     time.Time // when it was captured
	LinkType LinkType  // the link-layer header Data starts with
}

// Reader reads the packets of a pcap or pcapng capture in order.
type Reader struct {
	src packetSource
}

// NewReader reads the file header of a pcap or pcapng capture from r,
// recognising the format by its magic number.
func NewReader(r io.Reader) (*Reader, error) {
	src, err := openCapture(r)
	if err != nil {
		return nil, err
	}
	return &Reader{src: src}, nil
}

// Next returns the next packet, or io.EOF after the last one when the
// capture ends where a packet ends; a capture cut inside a packet or a
// block gives an error saying where.
func (r *Reader) Next() (Packet, error) {
	data, ci, lt, err := r.src.next()
	if err != nil {
		return Packet{}, err
	}
	return Packet{Data: data, Length: ci.Length, Time: ci.Timestamp, LinkType: LinkType(lt)}, nil
}

// packetSource reads packets and the link type each one was captured on.
type packetSource interface {
	next() ([]byte, captureInfo, layers.LinkType, error)
}

type captureInfo struct {
	Timestamp time.Time
	Length    int
}

type pcapSource struct{ r *pcapgo.Reader }

func (s pcapSource) next() ([]byte, captureInfo, layers.LinkType, error) {
	data, ci, err := s.r.ReadPacketData()
	return data, captureInfo{ci.Timestamp, ci.Length}, s.r.LinkType(), err
}

// pcapngSource reads pcapng. pcapgo reports a file that ends inside a block
// as a clean end of file, so the source keeps the bytes read past the last
// whole packet and, at the end, checks that they are whole blocks.
type pcapngSource struct {
	r     *pcapgo.NgReader
	br    *bufio.Reader // the reader pcapgo reads from
	in    *tailReader   // what br reads from
	order binary.ByteOrder
}

// tailReader keeps the bytes read since the last mark.
type tailReader struct {
	r    io.Reader
	keep bool
	tail []byte
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.keep {
		t.tail = append(t.tail, p[:n]...)
	}
	return n, err
}

// mark forgets all bytes but the last unread ones (still in the bufio
// buffer in front of this reader).
func (t *tailReader) mark(unread int) {
	t.tail = append(t.tail[:0], t.tail[len(t.tail)-unread:]...)
}

func (s *pcapngSource) next() ([]byte, captureInfo, layers.LinkType, error) {
	data, ci, err := s.r.ReadPacketData()
	if errors.Is(err, io.EOF) {
		return nil, captureInfo{}, 0, s.checkTail()
	}
	if err != nil {
		return nil, captureInfo{}, 0, err
	}
	s.in.mark(s.br.Buffered())
	iface, ierr := s.r.Interface(ci.InterfaceIndex)
	if ierr != nil {
		return nil, captureInfo{}, 0, fmt.Errorf("packet on interface %d: %w", ci.InterfaceIndex, ierr)
	}
	return data, captureInfo{ci.Timestamp, ci.Length}, iface.LinkType, nil
}

// checkTail walks the blocks after the last packet: io.EOF when they end
// exactly at the end of the file, an error naming the cut otherwise.
func (s *pcapngSource) checkTail() error {
	b := s.in.tail
	for len(b) > 0 {
		if len(b) < 12 {
			return fmt.Errorf("pcapng: the file ends inside a block header (%d stray bytes)", len(b))
		}
		n := int(s.order.Uint32(b[4:]))
		if n < 12 || n%4 != 0 {
			return fmt.Errorf("pcapng: block of type %#x has a bad length %d", s.order.Uint32(b), n)
		}
		if n > len(b) {
			return fmt.Errorf("pcapng: the file ends inside a block of type %#x: %d of its %d bytes are there", s.order.Uint32(b), len(b), n)
		}
		b = b[n:]
	}
	return io.EOF
}

// openCapture recognises pcap and pcapng by their magic numbers.
func openCapture(r io.Reader) (packetSource, error) {
	tr := &tailReader{r: r, keep: true}
	br := bufio.NewReader(tr)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("reading the file header: %w (an empty or truncated file?)", err)
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0x0a0d0d0a:
		shb, err := br.Peek(12)
		if err != nil {
			return nil, fmt.Errorf("pcapng section header: %w", err)
		}
		var order binary.ByteOrder = binary.LittleEndian
		if binary.BigEndian.Uint32(shb[8:]) == 0x1a2b3c4d {
			order = binary.BigEndian
		}
		// pcapgo reads from br itself when given a bufio.Reader.
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("pcapng: %w", err)
		}
		tr.mark(br.Buffered())
		return &pcapngSource{r: ng, br: br, in: tr, order: order}, nil
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		p, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
		tr.keep, tr.tail = false, nil // pcapgo reports cut pcap files itself
		return pcapSource{p}, nil
	}
	return nil, fmt.Errorf("not a pcap or pcapng file (magic %x)", magic)
}

// linkTypeName is gopacket's name for lt.
func linkTypeName(lt LinkType) string { return layers.LinkType(lt).String() }
