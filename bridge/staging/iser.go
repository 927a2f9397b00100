package staging

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"sync"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/iser"
)

// iserConn is one iSER connection (RFC 7145) as its session relays it:
// the initiator on the host side, the target on the other.
//
//	initiator ──► iSER header + iSCSI PDU (+ immediate data)  ──► target
//	initiator ◄── iSER header + iSCSI PDU (+ sense, text)     ◄── target
//	              RDMA READ of a write's solicited data and RDMA WRITE of
//	              a read's, issued by the target on the STags the SCSI
//	              Command's iSER header names, pass by (one-sided)
//
// Every message must be an iSCSI control-type message whose headers
// ParsePDU takes and whose length CheckLen takes, with an opcode of its
// side's (RFC 7143, 11.2.1.2; vendor-specific ones are not relayed);
// only a SCSI Command may advertise STags; SCSI Data-In and R2T never
// travel as messages in iSER (RDMA WRITE and READ replace them), nor do
// iSER Hello and HelloReply, which neither Linux end sends: anything else
// is refused, which ends the session. SCSI Commands are tracked by
// Initiator Task Tag until their SCSI Response; a response for no
// outstanding command, or a command whose tag is outstanding, is counted,
// logged and relayed, except that a route that stages refuses the
// latter (its response could not say whose staging it ends). A Task
// Management ABORT TASK that completes, and a Reject of a SCSI Command,
// end the named command; a task set, LUN or target reset that completes
// forgets the commands it aborted (their staging, if any, ends with the
// session: no response will name them).
//
// Staging (session.Stager), where the target sits behind a verbs leg
// (Message.Staging): a SCSI Command's write descriptor names a region the
// target READs, pulled first, of the solicited data: the Expected Data
// Transfer Length less what the initiator sends unsolicited, which is the
// immediate data when the command's F bit is set (the Linux initiator
// sets it when no unsolicited Data-Out follows), else min(FirstBurstLength,
// EDTL) as the login negotiated it (the write STag's offset is the
// buffer's plus that much: iser_prepare_write_cmd; the target READs from
// it the length less what it received: isert_rdma_rw_ctx_post's
// write_data_done). The read descriptor names a region the target
// WRITEs: the EDTL, or a bidirectional command's read length from its
// AHS. Restage rewrites each descriptor in the iSER header in place.
// The SCSI Response finishes the staging and pushes what the target
// says it transferred into the read region: when the iSCSI response is
// Command Completed at Target, the read length less the (bidirectional
// read) residual on an underflow, and all of it otherwise, whatever the
// SCSI status (a CHECK CONDITION with RECOVERED ERROR carries good data,
// and the Linux initiator takes the residual alone: iscsi_scsi_cmd_rsp);
// nothing when the target failed the command.
//
// Addresses: descriptors toward the target name the gateway's exposures,
// absolute addresses, so the connect request toward it says the
// initiator does not use zero-based addresses (ConnectData); the
// initiator's own base offsets, zero-based or not, are used as given in
// the gateway's READs and WRITEs of its memory, which its HCA resolves.
// Remote invalidation: the target is told the initiator takes no Send
// with Invalidate, so it never invalidates a gateway key (a SEND with
// invalidate it sends anyway is relayed as a plain SEND); when the
// initiator offered to take it, its accept says the target uses it, and
// the gateway sends the SCSI Response with invalidate of the STag the
// Linux target would have invalidated (isert_rx_opcode: the read STag,
// else the write STag; none for a bidirectional command, whose two
// STags the Linux initiator would both check against the one).
//
// A command that cannot be staged (larger than the pool's largest
// buffer; the far leg would not expose it) ends the session: an answer
// in the target's place cannot be correct, as the command's CmdSN would
// never reach the target, which then holds every later command waiting
// for it, and the StatSN of a SCSI Response is the target's to number.
type iserConn struct {
	route string
	host  int // the session direction of the initiator's messages
	stats *Stats
	log   *slog.Logger

	mu sync.Mutex // guards the fields below: both directions call at once
	// stages says the route stages: a message from the initiator was
	// Staging (its first, a Login, is).
	stages bool
	// offered says the initiator's connect request offered to take Send
	// with Invalidate; invalidate that the gateway does it (the route
	// stages, and the accept toward the initiator said so); remoteInv
	// that someone does (the gateway, or the target on a route that does
	// not stage), as counted.
	offered, invalidate, remoteInv bool
	// tsih is the Login's session handle (0: a new session, whose
	// leading connection this is), once seen.
	tsih     uint16
	tsihSeen bool
	// fullFeature: the login phase ended.
	fullFeature bool
	// text is login text carried over PDUs with Continue, by side (0 the
	// initiator's, 1 the target's).
	text [2][]byte
	// initialR2T and firstBurst are what each side said of InitialR2T
	// (0 unsaid, 1 Yes, -1 No) and FirstBurstLength (0 unsaid).
	initialR2T [2]int8
	firstBurst [2]uint32
	// outstanding are the SCSI Commands sent and not answered, by ITT;
	// tmfs the task management requests, by their ITT.
	outstanding map[uint32]iserCommand
	tmfs        map[uint32]iserTMF
	// regions and pushed are Message's scratch.
	regions []session.Region
	pushed  []int
	scratch []byte // headers that do not lie in a message's first piece
	warned  [NumWhys]bool
}

var _ session.Stager = (*iserConn)(nil)

// iserCommand is an outstanding SCSI Command.
type iserCommand struct {
	tag uint64
	lun uint64
	// staged: regions were staged, their descriptors at fields (the
	// offset of each one's STag in the message); the read region is
	// readRegion (-1: none), of readLen bytes, its residual the
	// bidirectional one when bidi.
	staged     bool
	fields     []int
	readRegion int
	readLen    uint32
	bidi       bool
	// invalidate: the gateway sends the response with invalidate of
	// invKey, the initiator's STag.
	invalidate bool
	invKey     uint32
}

// iserTMF is an outstanding task management request.
type iserTMF struct {
	function uint8
	ref      uint32 // ABORT TASK's referenced task
	lun      uint64
}

// iSER's defaults (RFC 7143, 13.11 and 13.14): InitialR2T Yes,
// FirstBurstLength 64 KiB.
const iserDefaultFirstBurst = 65536

// maxLoginText bounds the login text kept over Continue PDUs.
const maxLoginText = 64 << 10

// iserTagOf makes the session's tag of ITT itt, message number seq.
func iserTagOf(seq uint64, itt uint32) uint64 { return seq<<32 | uint64(itt) }

func newISERConn(o Options) *iserConn {
	return &iserConn{route: o.Route, host: o.Host, stats: o.Stats, log: o.Logger.With("protocol", config.ProtocolISER),
		outstanding: map[uint32]iserCommand{}, tmfs: map[uint32]iserTMF{}, scratch: make([]byte, iser.HeadersLen+255*4)}
}

// Message implements session.Protocol.
func (q *iserConn) Message(m *session.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.Dir == q.host {
		return q.initiatorLocked(m)
	}
	return q.targetLocked(m)
}

// pduLocked parses the headers of message p: the iSER header, the BHS
// and the AHS (a view of the first piece when it holds them, else a copy
// in the scratch), and checks the message's length against them.
func (q *iserConn) pduLocked(p session.Pieces) (iser.PDU, error) {
	b := p.Prefix(iser.HeadersLen, q.scratch)
	if len(b) == iser.HeadersLen {
		b = p.Prefix(iser.HeadersLen+iser.BHS(b[iser.HeaderLen:]).TotalAHSLength(), q.scratch)
	}
	pdu, _, err := iser.ParsePDU(b)
	if err != nil {
		return iser.PDU{}, err
	}
	return pdu, pdu.CheckLen(p.Len())
}

// initiatorLocked takes a message from the initiator.
func (q *iserConn) initiatorLocked(m *session.Message) error {
	pdu, err := q.pduLocked(m.Bytes)
	if err == nil {
		err = q.initiatorPDULocked(pdu)
	}
	if err != nil {
		q.stats.Errors[WhyMalformedCommand].Add(1)
		return q.errorf("from the initiator, not an iSER message: %w", err)
	}
	if m.Staging {
		q.stages = true
	}
	b := pdu.BHS
	m.Tag = iserTagOf(m.Seq, b.ITT())
	switch b.Opcode() {
	case iser.OpSCSICommand:
		return q.commandLocked(m, pdu)
	case iser.OpDataOut:
		return nil // unsolicited data: in the message, nothing to stage
	case iser.OpLogin:
		if !q.tsihSeen {
			q.tsih, q.tsihSeen = b.TSIH(), true
		}
		if err := q.loginTextLocked(0, pdu, m.Bytes); err != nil {
			return err
		}
	case iser.OpTaskMgmt:
		q.tmfs[b.ITT()] = iserTMF{function: b.Function(), ref: b.ReferencedTaskTag(), lun: b.LUN()}
	}
	q.stats.Commands[DataNone].Add(1)
	return nil
}

// initiatorPDULocked checks what an initiator may send.
func (q *iserConn) initiatorPDULocked(pdu iser.PDU) error {
	op := pdu.BHS.Opcode()
	if !op.FromInitiator() || !op.Known() {
		return fmt.Errorf("a %v, not a PDU an initiator sends", op)
	}
	if h := pdu.Header; (h.WSV() || h.RSV()) && op != iser.OpSCSICommand {
		return fmt.Errorf("a %v whose iSER header advertises STags (write %v, read %v): only a SCSI Command's does", op, h.WSV(), h.RSV())
	}
	return nil
}

// commandLocked takes a SCSI Command: counted, tracked by ITT, and its
// descriptors staged where the target sits behind a verbs leg.
func (q *iserConn) commandLocked(m *session.Message, pdu iser.PDU) error {
	h, b := pdu.Header, pdu.BHS
	itt, edtl := b.ITT(), b.EDTL()
	dir := DataNone
	switch {
	case b.Read() && b.Write():
		dir = DataBidirectional
	case b.Write():
		dir = DataHostToController
	case b.Read():
		dir = DataControllerToHost
	}
	e := iserCommand{tag: m.Tag, lun: b.LUN(), readRegion: -1}
	// The data each descriptor names, and whether the gateway can size it.
	var writeLen, readLen uint32
	sized := true
	if h.WSV() {
		if !b.Write() {
			return q.malformedLocked("a SCSI Command with a write STag and no W flag (ITT %#x)", itt)
		}
		unsol := uint32(pdu.DataLen())
		if !b.Final() {
			// Unsolicited Data-Out follows: up to FirstBurstLength in all.
			fb, r2t, ok := q.unsolicitedLocked()
			if ok && !r2t {
				unsol = max(unsol, min(fb, edtl))
			}
			sized = ok && !r2t
		}
		if unsol > edtl {
			return q.malformedLocked("a SCSI Command with %d bytes of unsolicited data and an Expected Data Transfer Length of %d (ITT %#x)", unsol, edtl, itt)
		}
		writeLen = edtl - unsol
	}
	if h.RSV() {
		if !b.Read() {
			return q.malformedLocked("a SCSI Command with a read STag and no R flag (ITT %#x)", itt)
		}
		readLen = edtl
		if dir == DataBidirectional {
			n, ok := pdu.ReadLength()
			if !ok {
				return q.malformedLocked("a bidirectional SCSI Command with a read STag and no Bidirectional Read Expected Data Transfer Length AHS (ITT %#x)", itt)
			}
			readLen, e.bidi = n, true
		}
	}
	q.stats.Commands[dir].Add(1)
	for _, n := range []uint32{writeLen, readLen} {
		if n > 0 {
			q.stats.Descriptors.Add(1)
			q.stats.DescribedBytes.Add(uint64(n))
		}
	}
	// The STag a response invalidates, as the Linux target picks it.
	var invKey uint32
	switch {
	case h.RSV() && !h.WSV():
		invKey = h.ReadSTag()
	case h.WSV() && !h.RSV():
		invKey = h.WriteSTag()
	}
	if q.remoteInv && invKey != 0 {
		q.stats.Invalidations.Add(1)
	}
	if _, dup := q.outstanding[itt]; dup {
		if m.Staging {
			q.stats.Errors[WhyReusedCommandID].Add(1)
			return q.errorf("ITT %#x is outstanding already: the gateway stages on this route, and could not match the SCSI Responses", itt)
		}
		q.noteLocked(WhyReusedCommandID, "a SCSI Command whose ITT is outstanding: relayed", "itt", fmt.Sprintf("%#x", itt))
	}
	if m.Staging {
		if !sized && writeLen > 0 {
			q.stats.Errors[WhyUnstageable].Add(1)
			return q.errorf("a SCSI Command (ITT %#x) announces unsolicited Data-Out, and the gateway does not know how much: %s", itt, q.unsolicitedWhyLocked())
		}
		q.regions = q.regions[:0]
		e.fields = nil
		if h.WSV() {
			if writeLen > 0 {
				q.regions = append(q.regions, session.Region{Remote: h.WriteVA(), RKey: h.WriteSTag(), Len: int(writeLen)})
				e.fields = append(e.fields, iser.WriteDescriptorOffset)
			} else {
				// Nothing to read: the initiator's STag does not reach the
				// target (it would name nothing of the gateway's).
				m.Bytes.WriteAt(make([]byte, iser.DescriptorLen), iser.WriteDescriptorOffset)
			}
		}
		if h.RSV() {
			if readLen > 0 {
				e.readRegion, e.readLen = len(q.regions), readLen
				q.regions = append(q.regions, session.Region{Remote: h.ReadVA(), RKey: h.ReadSTag(), Len: int(readLen), Write: true})
				e.fields = append(e.fields, iser.ReadDescriptorOffset)
			} else {
				m.Bytes.WriteAt(make([]byte, iser.DescriptorLen), iser.ReadDescriptorOffset)
			}
		}
		if len(q.regions) > 0 {
			e.staged = true
			m.Stage = q.regions
		}
		e.invalidate, e.invKey = q.invalidate && invKey != 0, invKey
	}
	q.outstanding[itt] = e
	return nil
}

// unsolicitedLocked is what the login negotiated of unsolicited data:
// FirstBurstLength and InitialR2T (RFC 7143: the lesser of the two
// sides' FirstBurstLength, InitialR2T Yes unless both said No); ok is
// false on a connection that joined an existing session (these keys are
// the leading connection's, which the gateway did not see; open-iscsi
// never does that: it logs every connection in with TSIH 0).
func (q *iserConn) unsolicitedLocked() (firstBurst uint32, initialR2T, ok bool) {
	if q.tsihSeen && q.tsih != 0 {
		return 0, true, false
	}
	firstBurst = iserDefaultFirstBurst
	if a, b := q.firstBurst[0], q.firstBurst[1]; a != 0 || b != 0 {
		firstBurst = min(cmpOr(a, b), cmpOr(b, a))
	}
	return firstBurst, !(q.initialR2T[0] < 0 && q.initialR2T[1] < 0), true
}

func cmpOr(a, b uint32) uint32 {
	if a != 0 {
		return a
	}
	return b
}

// unsolicitedWhyLocked says why unsolicited data cannot be sized.
func (q *iserConn) unsolicitedWhyLocked() string {
	if q.tsihSeen && q.tsih != 0 {
		return fmt.Sprintf("the connection joined session %#x, whose FirstBurstLength and InitialR2T its leading connection negotiated", q.tsih)
	}
	return "the login negotiated InitialR2T=Yes, which allows none"
}

// loginTextLocked reads a Login PDU's text (side 0 the initiator's, 1
// the target's), whole once its last PDU came, for the keys that size
// unsolicited data.
func (q *iserConn) loginTextLocked(side int, pdu iser.PDU, p session.Pieces) error {
	n := pdu.DataLen()
	if len(q.text[side])+n > maxLoginText {
		return q.malformedSideLocked(side, "login text past %d bytes", maxLoginText)
	}
	at := len(q.text[side])
	q.text[side] = append(q.text[side], make([]byte, n)...)
	p.ReadAt(q.text[side][at:], int64(pdu.DataOffset()))
	if pdu.BHS.Continue() {
		return nil
	}
	text := q.text[side]
	q.text[side] = nil
	for len(text) > 0 {
		if text[0] == 0 { // padding between or after pairs
			text = text[1:]
			continue
		}
		k, v, n, err := iser.NextKey(text)
		if err != nil {
			return q.malformedSideLocked(side, "login text: %w", err)
		}
		text = text[n:]
		switch string(k) {
		case "InitialR2T":
			switch string(v) {
			case "Yes":
				q.initialR2T[side] = 1
			case "No":
				q.initialR2T[side] = -1
			}
		case "FirstBurstLength":
			if x, err := strconv.ParseUint(string(v), 10, 32); err == nil && x > 0 {
				q.firstBurst[side] = uint32(x)
			}
		}
	}
	return nil
}

// targetLocked takes a message from the target.
func (q *iserConn) targetLocked(m *session.Message) error {
	pdu, err := q.pduLocked(m.Bytes)
	if err == nil {
		err = targetPDU(pdu)
	}
	if err != nil {
		q.stats.Errors[WhyMalformedCompletion].Add(1)
		return q.errorf("from the target, not an iSER message: %w", err)
	}
	q.stats.Completions.Add(1)
	if q.stages && m.Opcode == transport.OpSendWithInv {
		// A key the target has is the gateway's: never the initiator's to
		// invalidate (and the target was told not to).
		m.Opcode, m.InvRKey = transport.OpSend, 0
	}
	b := pdu.BHS
	itt := b.ITT()
	switch b.Opcode() {
	case iser.OpSCSIResponse:
		e, ok := q.outstanding[itt]
		if !ok {
			q.noteLocked(WhyUnknownCommandID, "a SCSI Response for no command outstanding: relayed", "itt", fmt.Sprintf("%#x", itt), "status", b.Status())
			return nil
		}
		delete(q.outstanding, itt)
		if e.staged {
			m.Finish, m.Finishes = e.tag, true
			if e.readRegion >= 0 {
				q.pushed = append(q.pushed[:0], make([]int, len(e.fields))...)
				q.pushed[e.readRegion] = int(readTransferred(e, b))
				m.Push, m.Pushed = true, q.pushed
			}
		}
		if e.invalidate {
			m.Opcode, m.InvRKey = transport.OpSendWithInv, e.invKey
		}
	case iser.OpLoginResp:
		if err := q.loginTextLocked(1, pdu, m.Bytes); err != nil {
			return err
		}
		if b.Transit() && b.NSG() == iser.FullFeature && b.StatusClass() == 0 {
			q.fullFeature = true
		}
	case iser.OpTaskMgmtResp:
		q.tmfDoneLocked(m, itt, b.Response())
	case iser.OpReject:
		// Its data is the rejected PDU's BHS: a SCSI Command it names is
		// over, with no SCSI Response.
		var raw [iser.BHSLen]byte
		if n, _ := m.Bytes.ReadAt(raw[:], int64(pdu.DataOffset())); n == iser.BHSLen && pdu.DataLen() >= iser.BHSLen {
			if r := iser.BHS(raw[:]); r.Opcode() == iser.OpSCSICommand {
				q.endLocked(m, r.ITT())
			}
		}
	}
	return nil
}

// targetPDU checks what a target may send.
func targetPDU(pdu iser.PDU) error {
	op := pdu.BHS.Opcode()
	switch {
	case op.FromInitiator() || !op.Known():
		return fmt.Errorf("a %v, not a PDU a target sends", op)
	case op == iser.OpDataIn || op == iser.OpR2T:
		return fmt.Errorf("a %v as a message: iSER moves a command's data with RDMA WRITE and READ instead (RFC 7145)", op)
	case pdu.Header.WSV() || pdu.Header.RSV():
		return fmt.Errorf("a %v whose iSER header advertises STags: only the initiator's SCSI Commands do", op)
	}
	return nil
}

// readTransferred is what the target says it wrote of command e's read
// region: nothing when it failed the command (iSCSI response other than
// Command Completed at Target); else the read length, less the residual
// on an underflow (the bidirectional read residual for a bidirectional
// command).
func readTransferred(e iserCommand, b iser.BHS) uint32 {
	if b.Response() != iser.ResponseCompleted {
		return 0
	}
	under, residual := b.Flags()&iser.RespUnderflow != 0, b.Residual()
	if e.bidi {
		under, residual = b.Flags()&iser.RespBidiUnderflow != 0, b.BidiResidual()
	}
	if !under {
		return e.readLen
	}
	return e.readLen - min(residual, e.readLen)
}

// tmfDoneLocked takes a task management response: a completed ABORT
// TASK ends its task (no SCSI Response will come); a completed task set,
// LUN or target reset forgets the commands it aborted.
func (q *iserConn) tmfDoneLocked(m *session.Message, itt uint32, response uint8) {
	t, ok := q.tmfs[itt]
	if !ok {
		return
	}
	delete(q.tmfs, itt)
	if response != iser.TMFRespComplete && response != iser.TMFRespNoSuchTask {
		return
	}
	switch t.function {
	case iser.TMFAbortTask:
		q.endLocked(m, t.ref)
	case iser.TMFAbortTaskSet, iser.TMFClearTaskSet, iser.TMFLUNReset, iser.TMFTargetWarm, iser.TMFTargetCold:
		n := 0
		for itt, e := range q.outstanding {
			if t.lun == e.lun || t.function == iser.TMFTargetWarm || t.function == iser.TMFTargetCold {
				delete(q.outstanding, itt)
				if e.staged {
					n++
				}
			}
		}
		if n > 0 {
			q.log.Warn("a task management function aborted staged commands: their staging is held until the session ends", "function", t.function, "commands", n)
		}
	}
}

// endLocked ends command itt, which will have no SCSI Response: m
// finishes its staging, nothing pushed.
func (q *iserConn) endLocked(m *session.Message, itt uint32) {
	e, ok := q.outstanding[itt]
	if !ok {
		return
	}
	delete(q.outstanding, itt)
	if e.staged && !m.Finishes {
		m.Finish, m.Finishes, m.Push = e.tag, true, false
	}
}

// Restage implements session.Stager: region i's descriptor in the iSER
// header now names staging at addr with rkey (its length unchanged).
func (q *iserConn) Restage(dir int, tag uint64, b session.Pieces, i int, addr uint64, rkey uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.outstanding[uint32(tag)]
	if !ok || e.tag != tag || i >= len(e.fields) {
		return fmt.Errorf("iser: restage region %d of ITT %#x: not a staged command", i, uint32(tag))
	}
	var d [iser.DescriptorLen]byte
	binary.BigEndian.PutUint32(d[:], rkey)
	binary.BigEndian.PutUint64(d[4:], addr)
	_, err := b.WriteAt(d[:], int64(e.fields[i]))
	return err
}

// Unstaged implements session.Stager: the command could not be staged,
// and the session ends (see iserConn: no answer in the target's place
// is correct).
func (q *iserConn) Unstaged(dir int, tag uint64, why error) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	itt := uint32(tag)
	if e, ok := q.outstanding[itt]; ok && e.tag == tag {
		delete(q.outstanding, itt)
	}
	q.stats.Errors[WhyUnstageable].Add(1)
	q.log.Warn("a SCSI Command could not be staged: the session ends (iSCSI has no answer the gateway may give in the target's place); a transfer larger than the pool's largest buffer needs larger pool classes or a smaller max_sectors at the initiator",
		"itt", fmt.Sprintf("%#x", itt), "why", why)
	return nil
}

// Sent implements session.Protocol: a command the target never got (its
// SEND failed) is no longer outstanding.
func (q *iserConn) Sent(dir int, tag uint64, status transport.Status) {
	if dir != q.host || status == transport.StatusSuccess {
		return
	}
	q.mu.Lock()
	if e, ok := q.outstanding[uint32(tag)]; ok && e.tag == tag {
		delete(q.outstanding, uint32(tag))
	}
	q.mu.Unlock()
}

// connectData is ConnectData for this connection (ConnectDataOf): it
// learns from the connect request whether the initiator takes Send with
// Invalidate, and where the route stages and it does, the accept toward
// the initiator says the target uses it: the gateway does, with each
// SCSI Response.
func (q *iserConn) connectData(toTarget, stages bool, b []byte) ([]byte, error) {
	out, err := iserConnectData(toTarget, stages, b)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	h := iser.CMHeader(b)
	if toTarget {
		q.offered = h.IsValid() && !h.NoSendWInv()
		return out, nil
	}
	if !stages {
		// The target invalidates the initiator's keys itself, when both
		// said so (the Linux initiator takes an accept without the CM
		// header as allowing it).
		q.remoteInv = q.offered && (!h.IsValid() || !h.NoSendWInv())
		return out, nil
	}
	if q.offered && len(out) >= iser.CMHeaderLen {
		out = append([]byte(nil), out...)
		iser.CMHeader(out).SetFlags(out[0] &^ iser.CMSendWInvNotSupported)
		q.invalidate, q.remoteInv = true, true
	}
	return out, nil
}

// iserConnectData is ConnectData for iSER: toward a target that stages,
// the connect request says the initiator uses no zero-based addresses
// (the descriptors it gets name the gateway's exposures by address) and
// takes no Send with Invalidate (the keys it gets are the gateway's);
// the accept toward the initiator says the target sends none (the
// gateway does not, unless the session's connectData says otherwise).
func iserConnectData(toTarget, stages bool, b []byte) ([]byte, error) {
	if !stages {
		return b, nil
	}
	h, _, err := iser.ParseCMHeader(b)
	if err != nil {
		if !toTarget {
			return b, nil // no header: the initiator takes it as it would from the target
		}
		return nil, fmt.Errorf("iser: an iSER connect request starts with the %d-byte iSER CM header: %w", iser.CMHeaderLen, err)
	}
	want := uint8(iser.CMSendWInvNotSupported)
	if toTarget {
		want |= iser.CMZBVANotSupported
	}
	if h.Flags()&want == want {
		return b, nil
	}
	out := append([]byte(nil), b...)
	iser.CMHeader(out).SetFlags(h.Flags() | want)
	return out, nil
}

// malformedLocked refuses a message from the initiator whose PDU is
// well-formed but breaks iSER's rules.
func (q *iserConn) malformedLocked(format string, args ...any) error {
	q.stats.Errors[WhyMalformedCommand].Add(1)
	return q.errorf("from the initiator, not an iSER message: "+format, args...)
}

func (q *iserConn) malformedSideLocked(side int, format string, args ...any) error {
	if side == 1 {
		q.stats.Errors[WhyMalformedCompletion].Add(1)
		return q.errorf("from the target, not an iSER message: "+format, args...)
	}
	return q.malformedLocked(format, args...)
}

// noteLocked counts why and logs its first occurrence in the session.
func (q *iserConn) noteLocked(why Why, msg string, args ...any) {
	noteOnce(q.stats, &q.warned, q.log, "connection", why, msg, args...)
}

// errorf is an error of the route's connection, naming its phase.
func (q *iserConn) errorf(format string, args ...any) error {
	phase := "login phase"
	if q.fullFeature {
		phase = "full feature phase"
	}
	return fmt.Errorf("route %q: iser connection (%s): "+format, append([]any{q.route, phase}, args...)...)
}

// iserQueue sizes an iSER connection's receives: its CM private data
// carries no queue size, and the protocol bounds what is in flight by
// the command window the login negotiates, after the connection is up.
// The Linux target posts 128 receives for commands and takes 6 more
// PDUs besides (ISERT_QP_MAX_RECV_DTOS, ISERT_MAX_RX_MISC_PDUS in
// drivers/infiniband/ulp/isert/ib_isert.h), and its command window is
// at most that deep: each command gets one response, so 134 receives
// on each side of the gateway take what a Linux peer sends at once
// (an initiator retries RNR NAKs only 6 times: iser_route_handler). The
// target's messages are not bounded by the CM data either (login and text
// responses up to what the initiator's login declared), so the size of
// receives stays the leg's.
func iserQueue(privateData []byte) (Queue, bool) {
	if !iser.CMHeader(privateData).IsValid() {
		return Queue{}, false
	}
	return Queue{Depth: iserReceives}, true
}

// iserReceives is what iserQueue asks of each side of a connection.
const iserReceives = 128 + 6
