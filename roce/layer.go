package roce

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// LayerTypeRoCEv2 is the gopacket layer type of a RoCEv2 transport packet.
// Importing this package registers it on UDP port 4791, so gopacket.NewPacket
// decodes Ethernet/IP/UDP/RoCEv2 end to end.
var LayerTypeRoCEv2 = gopacket.RegisterLayerType(4791, gopacket.LayerTypeMetadata{
	Name:    "RoCEv2",
	Decoder: gopacket.DecodeFunc(decodeRoCEv2),
})

func init() {
	layers.RegisterUDPPortLayerType(Port, LayerTypeRoCEv2)
}

// RoCEv2 is the gopacket layer of a RoCEv2 transport packet. Contents holds
// the BTH and extension headers, Payload the payload without pad. Decoding
// fills PacketFields (headers the opcode does not carry stay zero) and ICRC.
//
// To serialize, set PacketFields (BTH.PadCount is computed when FixLengths is
// set), put the payload in the layer that follows (gopacket.Payload), and,
// for a correct ICRC with ComputeChecksums, call SetNetworkLayerForICRC with
// the IP and UDP layers of the same packet.
type RoCEv2 struct {
	layers.BaseLayer
	PacketFields
	ICRC uint32

	pkt Packet
	ip  gopacket.NetworkLayer
	udp *layers.UDP
}

var (
	_ gopacket.DecodingLayer     = (*RoCEv2)(nil)
	_ gopacket.SerializableLayer = (*RoCEv2)(nil)
)

// LayerType returns LayerTypeRoCEv2.
func (l *RoCEv2) LayerType() gopacket.LayerType { return LayerTypeRoCEv2 }

// CanDecode returns LayerTypeRoCEv2.
func (l *RoCEv2) CanDecode() gopacket.LayerClass { return LayerTypeRoCEv2 }

// NextLayerType returns LayerTypePayload when the packet carries payload.
func (l *RoCEv2) NextLayerType() gopacket.LayerType {
	if len(l.Payload) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// Packet returns the views into the decoded bytes.
func (l *RoCEv2) Packet() *Packet { return &l.pkt }

// DecodeFromBytes decodes data, a UDP payload. It does not allocate.
func (l *RoCEv2) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := l.pkt.Decode(data); err != nil {
		df.SetTruncated()
		return err
	}
	l.PacketFields = l.pkt.Fields()
	l.ICRC = l.pkt.ICRC
	hdr := BTHLen + l.pkt.Opcode().HeaderLen()
	l.Contents = data[:hdr]
	l.Payload = l.pkt.Payload
	return nil
}

func decodeRoCEv2(data []byte, p gopacket.PacketBuilder) error {
	l := &RoCEv2{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(l)
	return p.NextDecoder(l.NextLayerType())
}

// SetNetworkLayerForICRC gives the IP (IPv4 or IPv6) and UDP layers that
// will be serialized in front of this layer, so SerializeTo can compute the
// ICRC, which covers them.
func (l *RoCEv2) SetNetworkLayerForICRC(ip gopacket.NetworkLayer, udp *layers.UDP) error {
	switch ip.(type) {
	case *layers.IPv4, *layers.IPv6:
	default:
		return fmt.Errorf("roce: ICRC needs an IPv4 or IPv6 layer, not %v", ip.LayerType())
	}
	l.ip, l.udp = ip, udp
	return nil
}

// SerializeTo prepends the BTH and extension headers to the payload already
// in b, appends pad and ICRC, and with ComputeChecksums computes the ICRC
// (which needs SetNetworkLayerForICRC).
func (l *RoCEv2) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	op := l.BTH.Opcode
	if !op.Valid() {
		return fmt.Errorf("roce: serialize: %w 0x%02x", ErrReservedOpcode, uint8(op))
	}
	payloadLen := len(b.Bytes())
	if !op.HasPayload() && payloadLen > 0 {
		return fmt.Errorf("roce: serialize: %v carries no payload, got %d bytes", op, payloadLen)
	}
	bth := l.BTH
	if opts.FixLengths {
		bth.PadCount = uint8(padFor(payloadLen))
	}
	pad := int(bth.PadCount & 3)
	hdr, err := b.PrependBytes(BTHLen + op.HeaderLen())
	if err != nil {
		return err
	}
	encodeHeaders(hdr, &bth, &l.PacketFields)
	tail, err := b.AppendBytes(pad + ICRCLen)
	if err != nil {
		return err
	}
	clear(tail)
	if !opts.ComputeChecksums {
		binary.LittleEndian.PutUint32(tail[pad:], l.ICRC)
		return nil
	}
	if l.ip == nil || l.udp == nil {
		return fmt.Errorf("roce: serialize with ComputeChecksums: call SetNetworkLayerForICRC first")
	}
	crc, err := l.icrcOver(b.Bytes(), opts)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(tail[pad:], crc)
	return nil
}

// icrcOver serializes copies of the UDP and IP layers in front of the
// transport packet, as they will be on the wire, and computes the ICRC.
func (l *RoCEv2) icrcOver(transport []byte, opts gopacket.SerializeOptions) (uint32, error) {
	s := gopacket.NewSerializeBufferExpectedSize(ipv6Hdr+udpHdr, 0)
	buf, _ := s.AppendBytes(len(transport))
	copy(buf, transport)
	udp := *l.udp
	if err := udp.SerializeTo(s, gopacket.SerializeOptions{FixLengths: opts.FixLengths}); err != nil {
		return 0, err
	}
	var err error
	switch ip := l.ip.(type) {
	case *layers.IPv4:
		c := *ip
		err = c.SerializeTo(s, opts)
	case *layers.IPv6:
		c := *ip
		err = c.SerializeTo(s, opts)
	}
	if err != nil {
		return 0, err
	}
	return ICRC(s.Bytes())
}

// VerifyLayerICRC checks the ICRC of the RoCEv2 layer in a packet decoded by
// gopacket, using its IPv4 or IPv6 layer.
func VerifyLayerICRC(p gopacket.Packet) error {
	n := p.NetworkLayer()
	if n == nil || p.Layer(LayerTypeRoCEv2) == nil {
		return fmt.Errorf("roce: verify ICRC: %w", ErrNotRoCEv2)
	}
	c, pl := n.LayerContents(), n.LayerPayload()
	if cap(c) < len(c)+len(pl) || (len(pl) > 0 && &c[:len(c)+1][len(c)] != &pl[0]) {
		return fmt.Errorf("roce: verify ICRC: IP header and payload are not contiguous")
	}
	_, err := VerifyICRC(c[:len(c)+len(pl)])
	return err
}
