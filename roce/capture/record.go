package capture

import (
	"fmt"
	"strings"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// Record is one decoded packet, as rbridge decode prints it. Its JSON form
// (the struct tags) is one object per packet; keys are only ever added to
// it, so that programs reading it keep working.
type Record struct {
	N        int    `json:"n"`             // the packet's number in the capture, from 1
	RoCE     bool   `json:"roce"`          // UDP to port 4791
	Src      string `json:"src,omitempty"` // address:port, once the UDP header decoded
	Dst      string `json:"dst,omitempty"`
	*Headers        // present once the BTH decoded
	Error    string `json:"error,omitempty"`

	Time    string        `json:"time,omitempty"`   // RFC 3339 in UTC, to the nanosecond the capture gives
	Cooked  *CookedRecord `json:"cooked,omitempty"` // a Linux cooked capture's header
	VLAN    []VLANRecord  `json:"vlan,omitempty"`   // outermost first
	IP      *IPRecord     `json:"ip,omitempty"`     // once the IP header's fixed part is captured
	NotRoCE string        `json:"not_roce,omitempty"`
	Note    string        `json:"note,omitempty"` // something not checked, not an error
	// Interface is the pcapng interface the packet was captured on, given
	// when the capture has more than one.
	Interface *int `json:"interface,omitempty"`
	// Capture is what the capture file's record of the packet claimed that
	// does not add up (its lengths); the packet was read as captured.
	Capture string `json:"capture,omitempty"`

	cut  bool      // the capture's snap length cut the packet
	time time.Time // Time, for the text form
}

// CookedRecord is what a Linux cooked header says.
type CookedRecord struct {
	IfIndex    uint32 `json:"ifindex,omitempty"` // version 2 only
	ARPHRD     uint16 `json:"arphrd"`            // the device type, 1 for Ethernet, 32 for InfiniBand
	PacketType string `json:"pkttype"`           // host, broadcast, multicast, otherhost, outgoing
}

// VLANRecord is one VLAN tag.
type VLANRecord struct {
	ID   uint16 `json:"id"`
	PCP  uint8  `json:"pcp"` // priority code point, the class PFC pauses
	DEI  bool   `json:"dei"`
	TPID uint16 `json:"tpid"` // 0x8100 for 802.1Q, 0x88a8 for an 802.1ad service tag
}

// IPRecord is what the IP header says.
type IPRecord struct {
	Version int    `json:"version"`
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	DSCP    uint8  `json:"dscp"`
	ECN     uint8  `json:"ecn"` // 3 is CE, congestion experienced
	TTL     uint8  `json:"ttl"` // the hop limit for IPv6
	// Proto is the IPv4 protocol, or the IPv6 next header after the
	// extension headers.
	Proto      uint8       `json:"proto"`
	ID         *uint16     `json:"id,omitempty"`         // IPv4 only: the identification, which the ICRC covers
	DF         *bool       `json:"df,omitempty"`         // IPv4 only
	FlowLabel  *uint32     `json:"flow_label,omitempty"` // IPv6 only
	ExtHeaders []int       `json:"ext_headers,omitempty"`
	Frag       *FragRecord `json:"frag,omitempty"`
}

// FragRecord describes an IP fragment.
type FragRecord struct {
	ID     uint32 `json:"id"`
	Offset int    `json:"offset"` // in bytes
	More   bool   `json:"more"`
}

// Headers are the BTH and the extension headers of a RoCEv2 packet, the
// payload length and the ICRC check.
type Headers struct {
	Opcode       string              `json:"opcode"`
	OpcodeNum    uint8               `json:"opcode_num"`
	SE           bool                `json:"se"`
	MigReq       bool                `json:"migreq"`
	Pad          int                 `json:"pad"`
	PKey         uint16              `json:"pkey"`
	FECN         bool                `json:"fecn"`
	BECN         bool                `json:"becn"`
	DQPN         uint32              `json:"dqpn"`
	AckReq       bool                `json:"ackreq"`
	PSN          uint32              `json:"psn"`
	PayloadLen   *int                `json:"payload_len,omitempty"`
	ICRC         *uint32             `json:"icrc,omitempty"` // the CRC-32 value; little-endian on the wire
	ICRCOK       *bool               `json:"icrc_ok,omitempty"`
	RETH         *RETHRecord         `json:"reth,omitempty"`
	AETH         *AETHRecord         `json:"aeth,omitempty"`
	Imm          *uint32             `json:"imm,omitempty"`
	IETH         *IETHRecord         `json:"ieth,omitempty"`
	DETH         *DETHRecord         `json:"deth,omitempty"`
	AtomicETH    *AtomicETHRecord    `json:"atomic_eth,omitempty"`
	AtomicAckETH *AtomicAckETHRecord `json:"atomic_ack_eth,omitempty"`
	RDETH        *RDETHRecord        `json:"rdeth,omitempty"`
	XRCETH       *XRCETHRecord       `json:"xrceth,omitempty"`
}

// RETHRecord is a RETH's fields.
type RETHRecord struct {
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dma_len"`
}

// AETHRecord is an AETH's fields.
type AETHRecord struct {
	Syndrome uint8  `json:"syndrome"`
	MSN      uint32 `json:"msn"`
}

// IETHRecord is an IETH's field.
type IETHRecord struct {
	RKey uint32 `json:"rkey"`
}

// DETHRecord is a DETH's fields.
type DETHRecord struct {
	QKey uint32 `json:"qkey"`
	SQPN uint32 `json:"sqpn"`
}

// AtomicETHRecord is an AtomicETH's fields.
type AtomicETHRecord struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

// AtomicAckETHRecord is an AtomicAckETH's field.
type AtomicAckETHRecord struct {
	Orig uint64 `json:"orig"`
}

// RDETHRecord is an RDETH's field (RD only).
type RDETHRecord struct {
	EEC uint32 `json:"eec"`
}

// XRCETHRecord is an XRCETH's field (XRC only).
type XRCETHRecord struct {
	SRQ uint32 `json:"srq"`
}

// ICRCBad reports whether the ICRC was checked and is wrong.
func (r *Record) ICRCBad() bool {
	return r.Headers != nil && r.ICRCOK != nil && !*r.ICRCOK
}

// Cut reports whether the capture's snap length cut the packet.
func (r *Record) Cut() bool { return r.cut }

func headersOf(p *roce.Packet) *Headers {
	h := p.BTH
	b := &Headers{
		Opcode: h.Opcode().String(), OpcodeNum: uint8(h.Opcode()), SE: h.SE(), MigReq: h.MigReq(),
		Pad: h.PadCount(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(), DQPN: h.DestQP(),
		AckReq: h.AckReq(), PSN: h.PSN(),
	}
	if p.RETH != nil {
		b.RETH = &RETHRecord{VA: p.RETH.VA(), RKey: p.RETH.RKey(), DMALen: p.RETH.DMALen()}
	}
	if p.AETH != nil {
		b.AETH = &AETHRecord{Syndrome: uint8(p.AETH.Syndrome()), MSN: p.AETH.MSN()}
	}
	if p.ImmDt != nil {
		v := p.ImmDt.Imm()
		b.Imm = &v
	}
	if p.IETH != nil {
		b.IETH = &IETHRecord{RKey: p.IETH.RKey()}
	}
	if p.DETH != nil {
		b.DETH = &DETHRecord{QKey: p.DETH.QKey(), SQPN: p.DETH.SrcQP()}
	}
	if p.AtomicETH != nil {
		a := p.AtomicETH
		b.AtomicETH = &AtomicETHRecord{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
	}
	if p.AtomicAckETH != nil {
		b.AtomicAckETH = &AtomicAckETHRecord{Orig: p.AtomicAckETH.Orig()}
	}
	if p.RDETH != nil {
		b.RDETH = &RDETHRecord{EEC: p.RDETH.EEC()}
	}
	if p.XRCETH != nil {
		b.XRCETH = &XRCETHRecord{SRQ: p.XRCETH.SRQ()}
	}
	return b
}

// Text renders the record on one line, without a newline: the number, the
// time of day (UTC), the endpoints, then what the packet is. What the link
// and IP headers say beyond the addresses (VLAN tags, DSCP, the cooked
// header) ends the line.
func (r *Record) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%5d ", r.N)
	if !r.time.IsZero() {
		sb.WriteString(r.time.Format("15:04:05.000000 "))
	}
	switch {
	case r.Src != "":
		fmt.Fprintf(&sb, "%s > %s ", r.Src, r.Dst)
	case r.IP != nil:
		fmt.Fprintf(&sb, "%s > %s ", r.IP.Src, r.IP.Dst)
	}
	if !r.RoCE {
		sb.WriteString("not RoCEv2")
		switch {
		case r.Error != "":
			sb.WriteString(": " + r.Error)
		case r.NotRoCE != "":
			sb.WriteString(" (" + r.NotRoCE + ")")
		}
		r.appendLink(&sb)
		return sb.String()
	}
	if b := r.Headers; b != nil {
		fmt.Fprintf(&sb, "%s qp=%#06x psn=%d", b.Opcode, b.DQPN, b.PSN)
		ce := r.IP != nil && r.IP.ECN == roce.ECNCE
		for _, fl := range []struct {
			on   bool
			name string
		}{{b.SE, "SE"}, {b.MigReq, "M"}, {b.FECN, "FECN"}, {b.BECN, "BECN"}, {b.AckReq, "A"}, {ce, "ECN-CE"}} {
			if fl.on {
				sb.WriteString(" " + fl.name)
			}
		}
		if b.PKey != roce.DefaultPKey {
			fmt.Fprintf(&sb, " pkey=%#04x", b.PKey)
		}
		if b.RDETH != nil {
			fmt.Fprintf(&sb, " rdeth(eec=%#06x)", b.RDETH.EEC)
		}
		if b.XRCETH != nil {
			fmt.Fprintf(&sb, " xrceth(srq=%#06x)", b.XRCETH.SRQ)
		}
		if b.RETH != nil {
			fmt.Fprintf(&sb, " reth(va=%#x rkey=%#x len=%d)", b.RETH.VA, b.RETH.RKey, b.RETH.DMALen)
		}
		if b.AETH != nil {
			fmt.Fprintf(&sb, " aeth(%v msn=%d)", roce.Syndrome(b.AETH.Syndrome), b.AETH.MSN)
		}
		if b.AtomicETH != nil {
			a := b.AtomicETH
			fmt.Fprintf(&sb, " atomic(va=%#x rkey=%#x swap_add=%#x compare=%#x)", a.VA, a.RKey, a.SwapAdd, a.Compare)
		}
		if b.AtomicAckETH != nil {
			fmt.Fprintf(&sb, " atomic_ack(orig=%#x)", b.AtomicAckETH.Orig)
		}
		if b.DETH != nil {
			fmt.Fprintf(&sb, " deth(qkey=%#x sqpn=%#06x)", b.DETH.QKey, b.DETH.SQPN)
		}
		if b.Imm != nil {
			fmt.Fprintf(&sb, " imm=%#08x", *b.Imm)
		}
		if b.IETH != nil {
			fmt.Fprintf(&sb, " ieth(rkey=%#x)", b.IETH.RKey)
		}
		if b.PayloadLen != nil {
			fmt.Fprintf(&sb, " len=%d", *b.PayloadLen)
		}
		if b.Pad != 0 {
			fmt.Fprintf(&sb, " pad=%d", b.Pad)
		}
		switch {
		case b.ICRCOK != nil:
			verdict := "ok"
			if !*b.ICRCOK {
				verdict = "BAD"
			}
			fmt.Fprintf(&sb, " icrc=%#08x %s", *b.ICRC, verdict)
		case b.ICRC != nil:
			fmt.Fprintf(&sb, " icrc=%#08x (%s)", *b.ICRC, r.Note)
		}
	}
	line := strings.TrimRight(sb.String(), " ")
	switch {
	case r.cut:
		line += " CUT: " + r.Error
	case r.Error != "" && (r.Headers == nil || r.ICRCOK == nil):
		line += " MALFORMED: " + r.Error
	}
	sb.Reset()
	sb.WriteString(line)
	r.appendLink(&sb)
	return sb.String()
}

// appendLink writes what the link and IP headers say beyond the addresses,
// where it differs from a plain untagged frame with DSCP 0.
func (r *Record) appendLink(sb *strings.Builder) {
	if r.Interface != nil {
		fmt.Fprintf(sb, " if=%d", *r.Interface)
	}
	for _, v := range r.VLAN {
		fmt.Fprintf(sb, " vlan=%d pcp=%d", v.ID, v.PCP)
		if v.DEI {
			sb.WriteString(" dei")
		}
	}
	if r.IP != nil && r.IP.DSCP != 0 {
		fmt.Fprintf(sb, " dscp=%d", r.IP.DSCP)
	}
	if c := r.Cooked; c != nil {
		if c.IfIndex != 0 {
			fmt.Fprintf(sb, " ifindex=%d", c.IfIndex)
		}
		sb.WriteString(" " + c.PacketType)
	}
	if r.Capture != "" {
		sb.WriteString(" (capture: " + r.Capture + ")")
	}
}
