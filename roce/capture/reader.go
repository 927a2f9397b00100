package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Packet is one packet of a capture.
type Packet struct {
	Data      []byte    // the bytes the capture kept; valid until the Reader's next call
	Length    int       // the packet's length on the wire, at least len(Data)
	Time      time.Time // when it was captured (zero for a pcapng simple packet block)
	LinkType  LinkType  // the link-layer header Data starts with
	Interface int       // the pcapng interface it was captured on; 0 in a pcap file
	// Interfaces is how many interfaces the pcapng section describes (0 in
	// a pcap file): with more than one, a record names its packet's.
	Interfaces int
	// Note says what the capture's record header claimed that does not
	// add up (a capture length above the snap length, an original length
	// below the capture length); the packet is read as captured.
	Note string
}

// lengthNote checks a packet record's lengths against each other and the
// snap length (0: none given), saying what does not add up.
func lengthNote(capLen, origLen, snapLen uint32) string {
	var notes []string
	if snapLen != 0 && capLen > snapLen {
		notes = append(notes, fmt.Sprintf("the capture kept %d bytes, above its snap length of %d", capLen, snapLen))
	}
	if origLen < capLen {
		notes = append(notes, fmt.Sprintf("the record's original length %d is below the %d bytes captured: taken as %d", origLen, capLen, capLen))
	}
	return strings.Join(notes, "; ")
}

// Reader reads the packets of a pcap or pcapng capture, or of either
// compressed with gzip, in order. It reads no further into its input than
// the packet it returns, so it follows a live capture written to a pipe
// (tcpdump -U -w -, dumpcap -w -) packet by packet.
type Reader struct {
	br     *bufio.Reader
	format string // "pcap" or "pcapng"
	buf    []byte // the packet or block last read

	// pcap
	order    binary.ByteOrder
	nanos    bool
	linkType LinkType
	snapLen  uint32

	// pcapng: the interfaces of the current section, and its byte order
	ifaces []ngInterface
}

// maxCaptured bounds the bytes a packet or block may claim, so that a
// corrupt length is refused instead of allocated.
const maxCaptured = 64 << 20

// Magic numbers of the formats, as the first four bytes read little-endian.
const (
	magicPcapLE     = 0xa1b2c3d4 // microseconds
	magicPcapBE     = 0xd4c3b2a1
	magicPcapNanoLE = 0xa1b23c4d // nanoseconds
	magicPcapNanoBE = 0x4d3cb2a1
	magicPcapng     = 0x0a0d0d0a // the section header block type
)

// NewReader reads the file header of a pcap or pcapng capture from r,
// recognising the format by its magic number.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, zerr := gzip.NewReader(br)
		switch {
		case errors.Is(zerr, gzip.ErrHeader): // its text has its own "gzip: "
			return nil, fmt.Errorf("starts with gzip's magic number (1f 8b) but its gzip header is not valid (%w)", zerr)
		case zerr != nil:
			return nil, fmt.Errorf("reading its gzip header: %w", zerr)
		}
		br = bufio.NewReader(zr)
		magic, err = br.Peek(4)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading the file header: %d bytes (an empty or truncated file?)", len(magic))
		}
		return nil, fmt.Errorf("reading the file header: %w", err)
	}
	cr := &Reader{br: br}
	switch binary.LittleEndian.Uint32(magic) {
	case magicPcapng:
		cr.format = "pcapng"
		err = cr.readSectionHeader()
	case magicPcapLE, magicPcapBE, magicPcapNanoLE, magicPcapNanoBE:
		cr.format = "pcap"
		err = cr.readPcapHeader()
	default:
		return nil, fmt.Errorf("not a pcap or pcapng file (magic %x)", magic)
	}
	if err != nil {
		return nil, err
	}
	return cr, nil
}

// Format returns "pcap" or "pcapng".
func (r *Reader) Format() string { return r.format }

// Next returns the next packet, or io.EOF after the last one when the
// capture ends where a packet (or a pcapng block) ends; a capture cut
// inside one gives an error saying where.
func (r *Reader) Next() (Packet, error) {
	if r.format == "pcap" {
		return r.nextPcap()
	}
	return r.nextPcapng()
}

// readFull reads exactly n bytes into r.buf, reusing it. It returns io.EOF
// when the input ends before the first byte and io.ErrUnexpectedEOF (with
// the count read) when it ends after it.
func (r *Reader) readFull(n int) ([]byte, int, error) {
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	got, err := io.ReadFull(r.br, b)
	return b, got, err
}
