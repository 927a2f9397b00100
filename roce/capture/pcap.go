package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// The pcap file format (draft-ietf-opsawg-pcap): a 24-byte file header,
// then per packet a 16-byte record header and the captured bytes.
//
//	file header                          record header
//	+------------------------------+     +------------------------------+
//	| magic                        |     | timestamp, seconds           |
//	+---------------+--------------+     +------------------------------+
//	| major (2)     | minor (4)    |     | timestamp, µs or ns          |
//	+---------------+--------------+     +------------------------------+
//	| reserved (time zone)         |     | captured length              |
//	+------------------------------+     +------------------------------+
//	| reserved (accuracy)          |     | original length              |
//	+------------------------------+     +------------------------------+
//	| snap length                  |
//	+------------------------------+
//	| FCS bits | link type         |
//	+------------------------------+
const (
	pcapFileHdr   = 24
	pcapRecordHdr = 16
	// pcapLinkTypeMask keeps the link type of the header's last word; the
	// top bits say whether frames end with an FCS (libpcap's LT_LINKTYPE).
	pcapLinkTypeMask = 0x03ffffff
)

func (r *Reader) readPcapHeader() error {
	h, got, err := r.readFull(pcapFileHdr)
	if err != nil {
		return fmt.Errorf("pcap: the file ends inside its %d-byte header, after %d bytes", pcapFileHdr, got)
	}
	switch binary.LittleEndian.Uint32(h) {
	case magicPcapLE:
		r.order = binary.LittleEndian
	case magicPcapNanoLE:
		r.order, r.nanos = binary.LittleEndian, true
	case magicPcapBE:
		r.order = binary.BigEndian
	case magicPcapNanoBE:
		r.order, r.nanos = binary.BigEndian, true
	}
	if major, minor := r.order.Uint16(h[4:]), r.order.Uint16(h[6:]); major != 2 {
		return fmt.Errorf("pcap: version %d.%d is not supported (2.4 is)", major, minor)
	}
	// The snap length (h[16:20]) only bounds what a capture kept; libpcap
	// and tshark read files that give 0, and so does this reader.
	r.snapLen = r.order.Uint32(h[16:])
	r.linkType = LinkType(r.order.Uint32(h[20:]) & pcapLinkTypeMask)
	return nil
}

func (r *Reader) nextPcap() (Packet, error) {
	h, got, err := r.readFull(pcapRecordHdr)
	switch {
	case errors.Is(err, io.EOF):
		return Packet{}, io.EOF
	case err != nil:
		return Packet{}, fmt.Errorf("pcap: the file ends inside a packet's %d-byte record header, after %d bytes", pcapRecordHdr, got)
	}
	sec, frac := r.order.Uint32(h), r.order.Uint32(h[4:])
	capLen, origLen := r.order.Uint32(h[8:]), r.order.Uint32(h[12:])
	if capLen > maxCaptured {
		return Packet{}, fmt.Errorf("pcap: a packet claims %d captured bytes, more than any capture holds", capLen)
	}
	if !r.nanos {
		frac *= 1000
	}
	p := Packet{
		Length:   int(max(origLen, capLen)),
		Time:     time.Unix(int64(sec), int64(frac)).UTC(),
		LinkType: r.linkType,
		Note:     lengthNote(capLen, origLen, r.snapLen),
	}
	p.Data, got, err = r.readFull(int(capLen))
	if err != nil {
		return Packet{}, fmt.Errorf("pcap: the file ends inside a packet: %d of its %d captured bytes are there", got, capLen)
	}
	return p, nil
}
