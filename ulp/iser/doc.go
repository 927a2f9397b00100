// Package iser is the wire format of iSER, iSCSI Extensions for RDMA (RFC
// 7145, over the iSCSI of RFC 7143), as typed views for a gateway that
// parses the messages passing through it and rewrites the initiator's
// memory descriptors in place to name its own staging memory.
//
// An iSER connection is one RC queue pair. The initiator and the target
// exchange SENDs, each an iSER header followed by an iSCSI PDU:
//
//	initiator -> target: Login, Text, NOP-Out, SCSI Command (+ immediate
//	                     data), unsolicited Data-Out, Task Management,
//	                     Logout
//	target -> initiator: Login/Text/Logout/Task Management Responses,
//	                     NOP-In, SCSI Response, Asynchronous Message,
//	                     Reject
//
// and the target moves a command's data with one-sided operations on the
// STags the initiator's iSER header names: it RDMA READs a write's
// solicited data from the write STag and offset, and RDMA WRITEs a read's
// data to the read STag and offset. SCSI Data-In and R2T never travel as
// messages: RDMA WRITE and READ replace them. The rdma_cm handshake that
// opens the connection carries the iSER CM header (CMHeader): whether the
// initiator uses zero-based addresses and takes Send with Invalidate.
//
// ParsePDU checks a message's headers and returns views; the Header's
// SetWrite and SetRead rewrite a descriptor in place without allocating:
//
//	p, n, err := iser.ParsePDU(msg)
//	if err != nil { /* not iSER */ }
//	if err := p.CheckLen(len(msg)); err != nil { /* cut or overlong */ }
//	if p.Header.WSV() { p.Header.SetWrite(stagingRKey, stagingAddr) }
//
// Files: header.go (the iSER header), bhs.go (the iSCSI Basic Header
// Segment, opcodes, SCSI Command and Response fields), pdu.go (a message:
// headers, AHS, length), cm.go (the CM private data), text.go (login and
// text keys), errors.go.
package iser
