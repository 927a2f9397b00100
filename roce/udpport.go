package roce

// Port is the IANA UDP destination port of RoCEv2.
const Port = 4791

const (
	flowLabelMask = 0xfffff
	udpSportMin   = 0xc000 // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
)

// FlowLabel returns the 20-bit flow label the Linux kernel derives from a
// connection's two QP numbers when none is set (rdma_calc_flow_label in
// include/rdma/ib_verbs.h). It is symmetric: both ends compute the same one.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & flowLabelMask)
}

// SourcePortFromFlowLabel returns the UDP source port for a flow label
// (rdma_flow_label_to_udp_sport): 0xC000 | (low 14 bits ^ high 6 bits).
func SourcePortFromFlowLabel(fl uint32) uint16 {
	low, high := fl&0x3fff, fl&0xfc000
	low ^= high >> 14
	return uint16(low | udpSportMin)
}

// SourcePort returns the UDP source port the kernel uses for a connection
// (rdma_get_udp_sport): from the flow label when it is not zero, else from a
// flow label derived from the local and remote QP numbers.
func SourcePort(fl, lqpn, rqpn uint32) uint16 {
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	return SourcePortFromFlowLabel(fl)
}
