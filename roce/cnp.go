package roce

// CNPLen is the length of a CNP's transport packet: BTH, 16 reserved bytes and
// the ICRC.
const CNPLen = BTHLen + CNPReservedLen + ICRCLen

// EncodeCNP writes the transport part of a RoCEv2 congestion notification
// packet into b (at least CNPLen bytes; a shorter b is an error and is left
// untouched): a BTH with opcode CNP, BECN set, P_Key 0xffff, DestQP the QP
// whose traffic was marked (the congested flow's source QP), PSN 0, then 16
// zero bytes. The ICRC (the last 4 bytes) is left to PutICRC, which needs
// the IP and UDP headers.
func EncodeCNP(b []byte, destQP uint32) error {
	if len(b) < CNPLen {
		return truncated("CNP", CNPLen, len(b))
	}
	BTH(b).Encode(&BTHFields{Opcode: CNP, PKey: DefaultPKey, BECN: true, DestQP: destQP})
	clear(b[BTHLen : BTHLen+CNPReservedLen])
	return nil
}
