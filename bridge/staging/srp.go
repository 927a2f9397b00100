package staging

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/srp"
)

// srpChannel is one SRP channel (an RDMA channel: one RC connection) as
// its session relays it: the initiator on the host side, the target on
// the other.
//
//	initiator ──► SRP_CMD (+ immediate data), SRP_TSK_MGMT,
//	              SRP_I_LOGOUT, SRP_CRED_RSP, SRP_AER_RSP          ──► target
//	initiator ◄── SRP_RSP, SRP_T_LOGOUT, SRP_CRED_REQ, SRP_AER_REQ ◄── target
//	              RDMA READ of a write's data-out buffers and RDMA
//	              WRITE of a read's data-in buffers, issued by the
//	              target on the descriptors an SRP_CMD names, pass by
//	              (one-sided)
//
// The login travels in the connect's private data (srp_login_req_rdma
// in the request, SRP_LOGIN_RSP in the accept), which the channel reads
// (connectData) for the offset of immediate data in its commands. Every
// message must be an IU of its side whose fixed part CheckIU takes, and
// an SRP_CMD must parse whole (its descriptors, and its immediate data
// within the message); anything else is refused, which ends the session.
// Commands are tracked by tag until their SRP_RSP; a response for no
// outstanding command, or a command whose tag is outstanding, is
// counted, logged and relayed, except that a route that stages refuses
// the latter (its response could not say whose staging it ends). A task
// management ABORT TASK that succeeds ends the command it names (the
// Linux target sends no SRP_RSP for it); an ABORT TASK SET, CLEAR TASK
// SET or LOGICAL UNIT RESET that succeeds forgets the commands of its
// LUN (their staging, if any, ends with the session).
//
// Staging (session.Stager), where the target sits behind a verbs leg
// (Message.Staging): each memory descriptor of a command (the direct
// one, or each of an indirect list) names a region: data-out regions
// the target READs, pulled first; data-in regions it WRITEs. Restage
// rewrites each descriptor's address and key in place (its length
// stays); an indirect descriptor's table descriptor, which names the
// descriptor list in the initiator's memory with a key of its own, is
// cleared to address 0 and key 0 with its length kept (the target
// takes the list from the command, and counts it by that length:
// srpt_get_desc_tbl). Immediate data travels in the command: nothing to
// stage. The SRP_RSP finishes the staging and pushes what the target
// wrote into the data-in regions, in the order the command listed them:
// their length, less data_in_res_cnt under DIUNDER. A command the
// gateway cannot stage is answered in the target's place with an
// SRP_RSP of CHECK CONDITION that returns its credit (req_lim_delta 1:
// the target never took it): one larger than the pool's largest buffer
// (Unstaged), or one whose descriptor list is not all in the command
// (an external table, which the target would read from the gateway's
// memory: the Linux initiator sends one only with allow_ext_sg, the
// Linux target refuses it). The Linux initiator's SCSI layer fails that
// I/O.
//
// Remote invalidation: neither Linux end uses Send with Invalidate
// (ulp/srp's package comment); a SEND with invalidate from the target on
// a route that stages is relayed as a plain SEND, as its key would be
// the gateway's.
type srpChannel struct {
	route string
	host  int // the session direction of the initiator's messages
	stats *Stats
	log   *slog.Logger

	mu sync.Mutex // guards the fields below: both directions call at once
	// stages says the route stages: a message from the initiator was
	// Staging.
	stages bool
	// login is the initiator's login request, once connectData saw it;
	// immOff the connection's immediate data offset once the target's
	// login response came (0: none).
	login     srp.LoginReqFields
	loginSeen bool
	immOff    int
	// outstanding are the commands sent and not answered, by SRP tag;
	// byTag the SRP tag of each, by the session's tag (the message's
	// Seq); tmfs the task management functions, by SRP tag.
	outstanding map[uint64]srpCommand
	byTag       map[uint64]uint64
	tmfs        map[uint64]srpTMF
	// regions and pushed are Message's scratch; scratch holds what of a
	// message's first bytes does not lie in its first piece.
	regions []session.Region
	pushed  []int
	scratch []byte
	warned  [NumWhys]bool
}

var _ session.Stager = (*srpChannel)(nil)

// srpCommand is an outstanding SRP_CMD.
type srpCommand struct {
	tag uint64 // the session's
	lun uint64
	// staged: regions were staged, their descriptors at fields (the
	// offset of each one's address in the message); reads are the
	// data-in regions, in the command's order.
	staged bool
	fields []int
	reads  []srpRead
}

// srpRead is a data-in region of a staged command: its index among the
// command's regions, and its length.
type srpRead struct {
	region int
	len    uint32
}

// srpTMF is an outstanding task management function.
type srpTMF struct {
	function uint8
	ref      uint64 // ABORT TASK's task tag
	lun      uint64
}

// srpMaxHeader is the most bytes of a message the channel reads at once
// (copied when its first piece holds fewer): an SRP_CMD's fixed part,
// the longest additional CDB and two indirect lists of 255 descriptors;
// an SRP_RSP whose sense data is longer is refused.
const srpMaxHeader = srp.CmdLen + 252 + 2*(srp.IndirectHeaderLen+255*srp.DescLen)

// srpMaxFixed is the longest fixed part of an IU (SRP_LOGIN_REQ's): what
// the channel reads of a message for its opcode's checks.
const srpMaxFixed = srp.LoginReqLen

func newSRPChannel(o Options) *srpChannel {
	return &srpChannel{route: o.Route, host: o.Host, stats: o.Stats, log: o.Logger.With("protocol", config.ProtocolSRP),
		outstanding: map[uint64]srpCommand{}, byTag: map[uint64]uint64{}, tmfs: map[uint64]srpTMF{},
		scratch: make([]byte, srpMaxHeader)}
}

// Message implements session.Protocol.
func (q *srpChannel) Message(m *session.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.Dir == q.host {
		return q.initiatorLocked(m)
	}
	return q.targetLocked(m)
}

// initiatorLocked takes a message from the initiator.
func (q *srpChannel) initiatorLocked(m *session.Message) error {
	head := m.Bytes.Prefix(min(m.Bytes.Len(), srpMaxFixed), q.scratch)
	op, err := srp.CheckIU(head)
	if err == nil && (!op.FromInitiator() || op == srp.OpLoginReq) {
		err = fmt.Errorf("an %v, not an IU an initiator sends on a channel", op)
	}
	if err != nil {
		return q.malformedLocked("%w", err)
	}
	if m.Staging {
		q.stages = true
	}
	m.Tag = m.Seq
	switch op {
	case srp.OpCmd:
		return q.commandLocked(m, head)
	case srp.OpTskMgmt:
		t, _, err := srp.ParseTskMgmt(head)
		if err != nil {
			return q.malformedLocked("%w", err)
		}
		q.tmfs[t.Tag()] = srpTMF{function: t.Function(), ref: t.TaskTag(), lun: t.LUN()}
	}
	q.stats.Commands[DataNone].Add(1)
	return nil
}

// commandLocked takes an SRP_CMD, whose first bytes (its fixed part at
// least) are head: counted, tracked by tag, and its descriptors staged
// where the target sits behind a verbs leg.
func (q *srpChannel) commandLocked(m *session.Message, head []byte) error {
	n, err := srp.CmdHeaderLen(head)
	if err != nil {
		return q.malformedLocked("%w", err)
	}
	if n > srpMaxHeader {
		return q.malformedLocked("an SRP_CMD whose descriptors take %d bytes", n)
	}
	c, _, err := srp.ParseCmdHeader(m.Bytes.Prefix(min(n, m.Bytes.Len()), q.scratch), q.immOff)
	if err == nil {
		err = c.CheckLen(m.Bytes.Len())
	}
	if err != nil {
		return q.malformedLocked("%w (the login's immediate data offset: %d)", err, q.immOff)
	}
	out, in := c.DataOut(), c.DataIn()
	dir := DataNone
	switch {
	case out.Format() != srp.FormatNone && in.Format() != srp.FormatNone:
		dir = DataBidirectional
	case out.Format() != srp.FormatNone:
		dir = DataHostToController
	case in.Format() != srp.FormatNone:
		dir = DataControllerToHost
	}
	q.stats.Commands[dir].Add(1)
	for _, b := range []srp.DataBuf{out, in} {
		for _, d := range b.All() {
			if d.Len() > 0 {
				q.stats.Descriptors.Add(1)
				q.stats.DescribedBytes.Add(uint64(d.Len()))
			}
		}
	}
	tag := c.Tag()
	if _, dup := q.outstanding[tag]; dup {
		if m.Staging {
			q.stats.Errors[WhyReusedCommandID].Add(1)
			return q.errorf("tag %#x is outstanding already: the gateway stages on this route, and could not match the SRP_RSPs", tag)
		}
		q.noteLocked(WhyReusedCommandID, "an SRP_CMD whose tag is outstanding: relayed", "tag", fmt.Sprintf("%#x", tag))
	}
	e := srpCommand{tag: m.Tag, lun: c.LUN()}
	if m.Staging {
		if reply := q.stageLocked(m, c, &e); reply != nil {
			m.Reply = reply
			return nil // answered in place: never outstanding at the target
		}
	}
	q.outstanding[tag] = e
	q.byTag[e.tag] = tag
	return nil
}

// stageLocked sets m.Stage for command c, whose target sits behind a
// verbs leg: a region per memory descriptor of a length above 0, the
// others and any table descriptor cleared. It returns the SRP_RSP to
// answer the command with in the target's place instead, when the
// gateway cannot stage it.
func (q *srpChannel) stageLocked(m *session.Message, c srp.Cmd, e *srpCommand) []byte {
	q.regions = q.regions[:0]
	var zero [srp.DescLen - 4]byte // a descriptor's address and key
	for k, b := range []srp.DataBuf{c.DataOut(), c.DataIn()} {
		write := k == 1 // the target WRITEs the data-in buffers
		if !b.TableInIU() {
			q.noteLocked(WhyUnstageable, "an SRP_CMD whose descriptor list is not all in it (the target would read the rest from the gateway's memory): answered with CHECK CONDITION",
				"tag", fmt.Sprintf("%#x", c.Tag()), "listed", b.Count(), "table", b.Table().Len()/srp.DescLen)
			return q.answerLocked(c.Tag(), srpSenseIllegalRequest, srpASCInvalidFieldInParameterList)
		}
		base := b.Offset()
		if b.Format() == srp.FormatIndirect {
			m.Bytes.WriteAt(zero[:], int64(base))
			base += srp.IndirectHeaderLen
		}
		for i, d := range b.All() {
			at := base + i*srp.DescLen
			if d.Len() == 0 {
				m.Bytes.WriteAt(zero[:], int64(at))
				continue
			}
			if write {
				e.reads = append(e.reads, srpRead{region: len(q.regions), len: d.Len()})
			}
			q.regions = append(q.regions, session.Region{Remote: d.VA(), RKey: d.Key(), Len: int(d.Len()), Write: write})
			e.fields = append(e.fields, at)
		}
	}
	if len(q.regions) > 0 {
		e.staged = true
		m.Stage = q.regions
	}
	return nil
}

// SCSI sense for the gateway's answers: ILLEGAL REQUEST, with INVALID
// FIELD IN CDB (a transfer larger than the gateway stages) or INVALID
// FIELD IN PARAMETER LIST (an external descriptor table).
const (
	srpStatusCheckCondition           = 0x02
	srpSenseIllegalRequest            = 0x05
	srpASCInvalidFieldInCDB           = 0x24
	srpASCInvalidFieldInParameterList = 0x26
	// Fixed-format sense data (SPC): current error, its additional
	// length the bytes after the first 8.
	srpSenseLen     = 18
	srpSenseCurrent = 0x70
)

// answerLocked makes the SRP_RSP the gateway answers command tag with,
// in the target's place: CHECK CONDITION with fixed-format sense data
// of key and asc, and the command's credit back.
func (q *srpChannel) answerLocked(tag uint64, key, asc uint8) []byte {
	q.stats.Answered.Add(1)
	var sense [srpSenseLen]byte
	sense[0], sense[2], sense[7], sense[12] = srpSenseCurrent, key, srpSenseLen-8, asc
	return srp.AppendRsp(nil, srp.RspFields{ReqLimDelta: 1, Tag: tag, Status: srpStatusCheckCondition, Sense: sense[:]})
}

// targetLocked takes a message from the target.
func (q *srpChannel) targetLocked(m *session.Message) error {
	head := m.Bytes.Prefix(min(m.Bytes.Len(), srpMaxFixed), q.scratch)
	op, err := srp.CheckIU(head)
	if err == nil && (op.FromInitiator() || op == srp.OpLoginRsp || op == srp.OpLoginRej) {
		err = fmt.Errorf("an %v, not an IU a target sends on a channel", op)
	}
	if err != nil {
		return q.malformedTargetLocked("%w", err)
	}
	q.stats.Completions.Add(1)
	if q.stages && m.Opcode == transport.OpSendWithInv {
		// A key the target has is the gateway's: never the initiator's to
		// invalidate.
		m.Opcode, m.InvRKey = transport.OpSend, 0
	}
	if op != srp.OpRsp {
		return nil
	}
	r, _, err := srp.ParseRsp(m.Bytes.Prefix(min(m.Bytes.Len(), srpMaxHeader), q.scratch))
	if err != nil {
		return q.malformedTargetLocked("%w", err)
	}
	tag := r.Tag()
	if t, ok := q.tmfs[tag]; ok {
		delete(q.tmfs, tag)
		q.tmfDoneLocked(m, t, r)
		return nil
	}
	e, ok := q.outstanding[tag]
	if !ok {
		q.noteLocked(WhyUnknownCommandID, "an SRP_RSP for no command outstanding: relayed", "tag", fmt.Sprintf("%#x", tag), "status", r.Status())
		return nil
	}
	q.forgetLocked(tag, e)
	if e.staged {
		m.Finish, m.Finishes = e.tag, true
		if len(e.reads) > 0 {
			q.pushed = append(q.pushed[:0], make([]int, len(e.fields))...)
			var readLen uint64
			for _, rd := range e.reads {
				readLen += uint64(rd.len)
			}
			left := srpTransferred(readLen, r)
			for _, rd := range e.reads {
				n := min(left, uint64(rd.len))
				q.pushed[rd.region] = int(n)
				left -= n
			}
			m.Push, m.Pushed = true, q.pushed
		}
	}
	return nil
}

// srpTransferred is what the target says it wrote of a command's
// data-in buffers of readLen bytes: all of them, less data_in_res_cnt
// under DIUNDER (srpt_build_cmd_rsp sets it from the transfer's residual,
// whatever the SCSI status).
func srpTransferred(readLen uint64, r srp.Rsp) uint64 {
	if r.Flags()&srp.DIUnder == 0 {
		return readLen
	}
	return readLen - min(uint64(r.DataInResidual()), readLen)
}

// tmfDoneLocked takes the response to a task management function: a
// successful ABORT TASK ends its task (no SRP_RSP will come for it); a
// successful task set or LUN reset forgets the LUN's commands.
func (q *srpChannel) tmfDoneLocked(m *session.Message, t srpTMF, r srp.Rsp) {
	if status, ok := r.TaskMgmtStatus(); !ok || status != srp.TaskMgmtSuccess {
		return
	}
	switch t.function {
	case srp.TskAbortTask:
		if e, ok := q.outstanding[t.ref]; ok {
			q.forgetLocked(t.ref, e)
			if e.staged && !m.Finishes {
				m.Finish, m.Finishes, m.Push = e.tag, true, false
			}
		}
	case srp.TskAbortTaskSet, srp.TskClearTaskSet, srp.TskLUNReset:
		n := 0
		for tag, e := range q.outstanding {
			if e.lun == t.lun {
				q.forgetLocked(tag, e)
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

// forgetLocked ends command tag, e.
func (q *srpChannel) forgetLocked(tag uint64, e srpCommand) {
	delete(q.outstanding, tag)
	delete(q.byTag, e.tag)
}

// lookupLocked is the outstanding command the session tags tag.
func (q *srpChannel) lookupLocked(tag uint64) (uint64, srpCommand, bool) {
	t, ok := q.byTag[tag]
	if !ok {
		return 0, srpCommand{}, false
	}
	e, ok := q.outstanding[t]
	return t, e, ok && e.tag == tag
}

// Restage implements session.Stager: region i's descriptor now names
// staging at addr with rkey (its length unchanged).
func (q *srpChannel) Restage(dir int, tag uint64, b session.Pieces, i int, addr uint64, rkey uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	t, e, ok := q.lookupLocked(tag)
	if !ok || i >= len(e.fields) {
		return fmt.Errorf("srp: restage region %d of message %d: not a staged command", i, tag)
	}
	var d [srp.DescLen - 4]byte
	binary.BigEndian.PutUint64(d[:], addr)
	binary.BigEndian.PutUint32(d[8:], rkey)
	if _, err := b.WriteAt(d[:], int64(e.fields[i])); err != nil {
		return fmt.Errorf("srp: restage region %d of the SRP_CMD tagged %#x: %w", i, t, err)
	}
	return nil
}

// Unstaged implements session.Stager: the command could not be staged
// (a transfer larger than the pool's largest buffer), and is answered
// in the target's place with CHECK CONDITION, INVALID FIELD IN CDB.
func (q *srpChannel) Unstaged(dir int, tag uint64, why error) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	t, e, ok := q.lookupLocked(tag)
	if !ok {
		return nil // the session ends: there is no command to answer
	}
	q.forgetLocked(t, e)
	q.stats.Errors[WhyUnstageable].Add(1)
	q.log.Warn("an SRP_CMD could not be staged: answered with CHECK CONDITION; a transfer larger than the pool's largest buffer needs larger pool classes or a smaller max_sect at the initiator",
		"tag", fmt.Sprintf("%#x", t), "why", why)
	return q.answerLocked(t, srpSenseIllegalRequest, srpASCInvalidFieldInCDB)
}

// Sent implements session.Protocol: a command the target never got (its
// SEND failed) is no longer outstanding.
func (q *srpChannel) Sent(dir int, tag uint64, status transport.Status) {
	if dir != q.host || status == transport.StatusSuccess {
		return
	}
	q.mu.Lock()
	if t, e, ok := q.lookupLocked(tag); ok {
		q.forgetLocked(t, e)
	}
	q.mu.Unlock()
}

// connectData is ConnectData for this channel (ConnectDataOf): it reads
// the login, the initiator's request and the target's response, for the
// offset of immediate data in the channel's commands. Both pass on
// unchanged: staging needs nothing of them changed (immediate data
// travels in the commands, and neither end invalidates remotely).
func (q *srpChannel) connectData(toTarget, stages bool, b []byte) ([]byte, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if toTarget {
		r, _, err := srp.ParseLoginReqRDMA(b)
		if err != nil {
			return nil, fmt.Errorf("srp: an SRP connect request carries an srp_login_req_rdma in its private data: %w", err)
		}
		q.login, q.loginSeen = r.Fields(), true
		return b, nil
	}
	r, _, err := srp.ParseLoginRsp(b)
	if err != nil {
		return nil, fmt.Errorf("srp: an SRP target's accept carries an SRP_LOGIN_RSP in its private data: %w", err)
	}
	if q.loginSeen {
		q.immOff = srp.ImmDataOffset(q.login, r)
	}
	return b, nil
}

// srpQueue sizes an SRP channel's receives: the login request says the
// largest IU the initiator sends (req_it_iu_len); how many it may have in
// flight is the credit the target grants in its login response, after
// the gateway's receives are posted. The Linux target grants at most its
// channel's receive queue, MAX_SRPT_RQ_SIZE (128: ib_srpt.h), and sends
// one response per command; the Linux initiator reserves a few more for
// task management (SRP_TSK_MGMT_SQ_SIZE) and the target's requests
// (SRP_RSP_SQ_SIZE): 128 + 8 receives on each side of the gateway take
// what a Linux peer sends at once.
func srpQueue(privateData []byte) (Queue, bool) {
	r, _, err := srp.ParseLoginReqRDMA(privateData)
	if err != nil {
		return Queue{}, false
	}
	return Queue{Depth: srpReceives, RequestSize: int(r.ReqITIULen())}, true
}

// srpReceives is what srpQueue asks of each side of a channel.
const srpReceives = 128 + 8

// malformedLocked refuses a message from the initiator.
func (q *srpChannel) malformedLocked(format string, args ...any) error {
	q.stats.Errors[WhyMalformedCommand].Add(1)
	return q.errorf("from the initiator, not an SRP message: "+format, args...)
}

// malformedTargetLocked refuses a message from the target.
func (q *srpChannel) malformedTargetLocked(format string, args ...any) error {
	q.stats.Errors[WhyMalformedCompletion].Add(1)
	return q.errorf("from the target, not an SRP message: "+format, args...)
}

// noteLocked counts why and logs its first occurrence in the session.
func (q *srpChannel) noteLocked(why Why, msg string, args ...any) {
	noteOnce(q.stats, &q.warned, q.log, "channel", why, msg, args...)
}

// errorf is an error of the route's channel.
func (q *srpChannel) errorf(format string, args ...any) error {
	return fmt.Errorf("route %q: srp channel: "+format, append([]any{q.route}, args...)...)
}
