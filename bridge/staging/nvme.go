package staging

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// nvmeQueue is one NVMe-oF queue pair as its session relays it: the
// admin queue or one I/O queue (each is an RC connection of its own).
//
//	host ──► command capsule (SQE + in-capsule bytes) ──► controller
//	host ◄── completion (CQE, 16 bytes)               ◄── controller
//	         RDMA READ/WRITE of the host's memory, issued by the controller,
//	         pass by (one-sided: no message)
//
// Every message from the host must be a capsule ParseCapsule accepts,
// every message from the controller exactly a completion: anything else
// is refused, which ends the session. Commands are tracked by command ID
// until their completion; a completion for no outstanding command, or a
// command whose ID is outstanding, is counted and logged, and relayed
// (it breaks nothing of the gateway's; the host's stack deals with it).
//
// Staging (session.Stager), where the controller sits behind a verbs leg
// (Message.Staging): each keyed descriptor of a length above 0 names a
// region, which the controller READs (a host-to-controller command:
// pulled first) or WRITEs (controller-to-host: pushed when the
// completion comes, when it is a success). The descriptor is rewritten
// in place to the staging (Restage); an invalidate subtype becomes the
// address subtype toward the controller, which so never invalidates a
// gateway key, and the completion reaches the host as a SEND with
// invalidate of the host's own key, as the controller would have sent
// it. A command that cannot be staged is answered in the controller's
// place with a data transfer error; one with protection information,
// which the gateway does not move, with Invalid Field in Command.
type nvmeQueue struct {
	route string
	host  int // the session direction of the host's messages
	stats *Stats
	log   *slog.Logger

	mu sync.Mutex // guards the fields below: both directions call at once
	// qid is the queue's ID, from its Connect (-1 until then).
	qid int
	// outstanding are the commands sent and not completed, by command ID.
	outstanding map[uint16]nvmeCommand
	// sqHead is the last submission queue head a completion carried:
	// what a completion the gateway makes carries.
	sqHead uint16
	// maxTransfer bounds the MDTS the host is told (Options.MaxTransfer);
	// pageShift is the controller's smallest page, from its CAP (4 KiB
	// until a Property Get of CAP says otherwise).
	maxTransfer int
	pageShift   uint
	// regions and pos are Message's scratch: the regions of a command
	// to stage, and where each one's descriptor lies in the message.
	regions []session.Region
	// scratch holds a capsule whose bytes ParseCapsule needs do not lie
	// in the message's first piece (kept while small).
	scratch []byte
	warned  [NumWhys]bool // the first of each in the session was logged
}

var _ session.Stager = (*nvmeQueue)(nil)

// nvmeCommand is an outstanding command as its queue tracks it.
type nvmeCommand struct {
	tag uint64 // the session's tag: the message's number, and its ID
	// pos are where its staged descriptors lie in the capsule, in the
	// order of its regions (nil: nothing staged).
	pos []int
	// invalidate says the host asked the controller to invalidate its
	// key invKey with the completion: the gateway does, as it cleared
	// the request toward the controller.
	invalidate bool
	invKey     uint32
	staged     bool
	// identify is an Identify Controller, getCAP a Property Get of CAP:
	// their answers are what clamping MDTS needs.
	identify, getCAP bool
}

// tagOf makes the session's tag of command ID cid, message number seq:
// unique on the queue, and its low bits the ID.
func tagOf(seq uint64, cid uint16) uint64 { return seq<<16 | uint64(cid) }

// keepScratch bounds the scratch kept between messages: a capsule's SQE
// and a descriptor list always fit, in-capsule data usually does (the
// Linux target's default is 8 KiB).
const keepScratch = 16 << 10

func newNVMeQueue(o Options) *nvmeQueue {
	return &nvmeQueue{route: o.Route, host: o.Host, stats: o.Stats, log: o.Logger.With("protocol", config.ProtocolNVMe), qid: -1,
		outstanding: map[uint16]nvmeCommand{}, maxTransfer: o.MaxTransfer, pageShift: 12}
}

// Message implements session.Protocol.
func (q *nvmeQueue) Message(m *session.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if m.Dir == q.host {
		return q.commandLocked(m)
	}
	return q.completionLocked(m)
}

// commandLocked takes a message from the host: a command capsule.
func (q *nvmeQueue) commandLocked(m *session.Message) error {
	c, err := nvme.ParseCapsule(q.capsuleLocked(m.Bytes))
	if err != nil {
		q.stats.Errors[WhyMalformedCommand].Add(1)
		return q.errorf("from the host, not a command capsule: %w", err)
	}
	cmd := c.Command()
	q.stats.Commands[cmd.Direction()&3].Add(1)
	for _, d := range c.Keyed().All() {
		if n := d.Length(); n > 0 {
			q.stats.Descriptors.Add(1)
			q.stats.DescribedBytes.Add(uint64(n))
		}
		if d.Invalidate() {
			q.stats.Invalidations.Add(1)
		}
	}
	if cmd.IsFabrics() && cmd.FCType() == nvme.FCConnect {
		if con, _, err := nvme.ParseConnect(c.Bytes()); err == nil {
			q.qid = int(con.QID())
		}
	}
	cid := cmd.CommandID()
	if _, dup := q.outstanding[cid]; dup {
		if m.Staging {
			// Its completion could not say which one's staging it ends.
			q.stats.Errors[WhyReusedCommandID].Add(1)
			return q.errorf("command ID %d is outstanding on its queue already: the gateway stages on this route, and cannot match the completions", cid)
		}
		q.noteLocked(WhyReusedCommandID, "a command whose ID is outstanding on its queue: relayed", "command_id", cid)
	}
	entry := nvmeCommand{tag: tagOf(m.Seq, cid)}
	m.Tag = entry.tag
	if q.qid == 0 && q.maxTransfer > 0 {
		// The admin queue (Identify's opcode is an I/O one elsewhere).
		entry.identify = cmd.Opcode() == nvme.OpIdentify && cmd.IdentifyCNS() == nvme.CNSController
		entry.getCAP = cmd.IsFabrics() && cmd.FCType() == nvme.FCPropertyGet && cmd.PropertyOffset() == nvme.PropertyCAP
	}
	if m.Staging && c.Keyed().Len() > 0 {
		if reply := q.stageLocked(m, c, &entry); reply != nil {
			m.Reply = reply
			return nil // answered in place: never outstanding at the controller
		}
	}
	q.outstanding[cid] = entry
	return nil
}

// stageLocked sets m.Stage for command capsule c, whose controller sits
// behind a verbs leg: a region per keyed descriptor of a length above 0,
// and the invalidate subtype cleared toward the controller. It returns
// a completion to answer the command with in the controller's place
// instead, when the gateway cannot move its data.
func (q *nvmeQueue) stageLocked(m *session.Message, c nvme.Capsule, e *nvmeCommand) []byte {
	cmd := c.Command()
	dir := cmd.Direction()
	base := nvme.DataPointerOffset
	if c.Kind() == nvme.DataKeyedList {
		base = nvme.CommandLen + int(cmd.DataPointer().Address())
	}
	q.regions = q.regions[:0]
	for i, d := range c.Keyed().All() {
		n := d.Length()
		if d.Invalidate() && !e.invalidate {
			e.invalidate, e.invKey = true, d.Key()
		}
		if n == 0 {
			continue
		}
		if dir != nvme.DirHostToController && dir != nvme.DirControllerToHost {
			q.stats.Errors[WhyUnstageable].Add(1)
			q.log.Warn("a command with data but no single direction: the gateway cannot stage it, answered with Invalid Field", "queue", q.queueLocked(), "opcode", cmd.Opcode(), "direction", dir)
			return q.answerLocked(cmd.CommandID(), nvme.StatusInvalidField|nvme.StatusDNR)
		}
		q.regions = append(q.regions, session.Region{Remote: d.Address(), RKey: d.Key(), Len: int(n), Write: dir == nvme.DirControllerToHost})
		e.pos = append(e.pos, base+i*nvme.SGLLen)
	}
	if q.qid > 0 && hasProtection(cmd) {
		q.noteLocked(WhyProtection, "a command with protection information, which the gateway does not move: answered with Invalid Field", "opcode", cmd.Opcode())
		return q.answerLocked(cmd.CommandID(), nvme.StatusInvalidField|nvme.StatusDNR)
	}
	if e.invalidate {
		// Toward the controller the key is the gateway's: never invalidated
		// remotely (a revoked exposure ends its access).
		addr := [1]byte{byte(nvme.SGLKeyedDataBlock)<<4 | byte(nvme.SGLAddress)}
		for i, d := range c.Keyed().All() {
			if d.Invalidate() {
				m.Bytes.WriteAt(addr[:], int64(base+i*nvme.SGLLen+nvme.SGLLen-1))
			}
		}
	}
	if len(q.regions) > 0 {
		e.staged = true
		m.Stage = q.regions
	}
	return nil
}

// hasProtection reports whether an I/O command asks for protection
// information (PRINFO, CDW12 bits 29:26, of the NVM command set's Write,
// Read, Compare and Verify) or names separate metadata (MPTR).
func hasProtection(cmd nvme.Command) bool {
	if cmd.Metadata() != 0 {
		return true
	}
	switch cmd.Opcode() {
	case 0x01, 0x02, 0x05, 0x0c:
		return cmd.DWord(12)>>26&0xf != 0
	}
	return false
}

// answerLocked makes the completion the gateway answers command cid
// with, in the controller's place.
func (q *nvmeQueue) answerLocked(cid uint16, status nvme.Status) []byte {
	q.stats.Answered.Add(1)
	c := make(nvme.Completion, nvme.CompletionLen)
	c.Encode(&nvme.CompletionFields{SQHead: q.sqHead, SQID: uint16(max(q.qid, 0)), CommandID: cid, Status: status})
	return c
}

// Restage implements session.Stager: region i's descriptor now names
// staging at addr with rkey (its length unchanged).
func (q *nvmeQueue) Restage(dir int, tag uint64, b session.Pieces, i int, addr uint64, rkey uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.outstanding[uint16(tag)]
	if !ok || e.tag != tag || i >= len(e.pos) {
		return fmt.Errorf("nvme: restage region %d of command %d: not a staged command", i, uint16(tag))
	}
	var raw [nvme.SGLLen]byte
	if n, _ := b.ReadAt(raw[:], int64(e.pos[i])); n != nvme.SGLLen {
		return fmt.Errorf("nvme: restage region %d of command %d: the descriptor at %d is past the capsule", i, uint16(tag), e.pos[i])
	}
	d := nvme.SGL(raw[:])
	d.SetAddress(addr)
	d.SetKey(rkey)
	_, err := b.WriteAt(raw[:], int64(e.pos[i]))
	return err
}

// Unstaged implements session.Stager: the command could not be staged;
// the host gets a data transfer error for it, from the gateway.
func (q *nvmeQueue) Unstaged(dir int, tag uint64, why error) []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	cid := uint16(tag)
	if e, ok := q.outstanding[cid]; ok && e.tag == tag {
		delete(q.outstanding, cid)
	}
	q.stats.Errors[WhyUnstageable].Add(1)
	q.log.Warn("a command could not be staged: the host gets a data transfer error from the gateway", "queue", q.queueLocked(), "command_id", cid, "why", why)
	return q.answerLocked(cid, nvme.StatusDataXferError)
}

// capsuleLocked returns the bytes of p that ParseCapsule needs: the SQE,
// and what an offset data pointer names after it (in-capsule data, or a
// list of keyed descriptors). They are a view of the first piece when it
// holds them (the common case: an assembled message, or a first packet
// that holds the SQE and its list), else a copy: parsing them gives what
// parsing the whole message would, as ParseCapsule allows bytes past what
// the data pointer names.
func (q *nvmeQueue) capsuleLocked(p session.Pieces) []byte {
	total := p.Len()
	need := nvme.CommandLen
	if total >= nvme.CommandLen {
		var sqe [nvme.CommandLen]byte
		p.ReadAt(sqe[:], 0)
		d := nvme.Command(sqe[:]).DataPointer()
		if t := d.Type(); t == nvme.SGLDataBlock || t == nvme.SGLLastSegment {
			// Past the message: ParseCapsule says so from all of it.
			need = total
			if off := d.Address(); off <= uint64(total) {
				need = int(min(uint64(nvme.CommandLen)+off+uint64(d.Length()), uint64(total)))
			}
		}
	}
	need = min(need, total)
	if len(p) > 0 && len(p[0]) >= need {
		return p[0][:need:need]
	}
	b := q.scratch
	if cap(b) < need {
		b = make([]byte, need)
		if need <= keepScratch {
			q.scratch = b
		}
	}
	b = b[:need]
	p.ReadAt(b, 0)
	return b
}

// completionLocked takes a message from the controller: a completion.
func (q *nvmeQueue) completionLocked(m *session.Message) error {
	var raw [nvme.CompletionLen]byte
	n, _ := m.Bytes.ReadAt(raw[:], 0)
	c, _, err := nvme.ParseCompletion(raw[:n])
	if err == nil && m.Bytes.Len() != nvme.CompletionLen {
		err = fmt.Errorf("%d bytes: the RDMA binding's response capsule is the %d-byte completion alone", m.Bytes.Len(), nvme.CompletionLen)
	}
	if err != nil {
		q.stats.Errors[WhyMalformedCompletion].Add(1)
		return q.errorf("from the controller, not a completion: %w", err)
	}
	q.stats.Completions.Add(1)
	q.sqHead = c.SQHead()
	cid := c.CommandID()
	e, ok := q.outstanding[cid]
	if !ok {
		q.noteLocked(WhyUnknownCommandID, "a completion for no command outstanding on its queue: relayed", "command_id", cid, "status", c.Status())
		return nil
	}
	delete(q.outstanding, cid)
	if e.getCAP && c.Status().Success() {
		q.pageShift = nvme.CAPMinPageShift(c.Result())
	}
	if e.staged {
		m.Finish, m.Finishes, m.Push = e.tag, true, c.Status().Success()
		if e.identify && m.Push {
			m.Patch = q.clampMDTS(q.pageShift)
		}
	}
	if e.invalidate && m.Opcode != transport.OpSendWithInv {
		m.Opcode, m.InvRKey = transport.OpSendWithInv, e.invKey
	}
	return nil
}

// clampMDTS returns the Patch of an Identify Controller's data on its way
// to the host: its MDTS bounded by the gateway's largest staging buffer,
// in the controller's pages of 1<<pageShift bytes. A controller with no
// limit, or one above the gateway's, would let the host send a command
// the gateway cannot stage, which ends its queue.
func (q *nvmeQueue) clampMDTS(pageShift uint) func(int, []byte) {
	at := nvme.IdentifyMDTS // in the regions' bytes, in order
	return func(_ int, b []byte) {
		if at < 0 || at >= len(b) {
			at -= len(b)
			return
		}
		if v, changed := nvme.ClampMDTS(b[at], pageShift, q.maxTransfer); changed {
			q.log.Info("the controller's largest transfer (MDTS) told to the host as the gateway's largest staging buffer", "route", q.route,
				"controller_bytes", mdtsBytes(b[at], pageShift), "told_bytes", mdtsBytes(v, pageShift))
			b[at] = v
		}
		at = -1
	}
}

// mdtsBytes says MDTS v in bytes, 0 for no limit.
func mdtsBytes(v uint8, pageShift uint) uint64 {
	if v == 0 || uint(v)+pageShift >= 64 {
		return 0
	}
	return 1 << (uint(v) + pageShift)
}

// Sent implements session.Protocol: a command the controller never got
// (its SEND failed) is no longer outstanding.
func (q *nvmeQueue) Sent(dir int, tag uint64, status transport.Status) {
	if dir != q.host || status == transport.StatusSuccess {
		return
	}
	q.mu.Lock()
	if e, ok := q.outstanding[uint16(tag)]; ok && e.tag == tag {
		delete(q.outstanding, uint16(tag))
	}
	q.mu.Unlock()
}

// noteLocked counts why and logs its first occurrence in the session.
func (q *nvmeQueue) noteLocked(why Why, msg string, args ...any) {
	noteOnce(q.stats, &q.warned, q.log, "queue", why, msg, append(args, "queue", q.queueLocked())...)
}

// queueLocked names the queue: its ID once its Connect was seen.
func (q *nvmeQueue) queueLocked() string {
	switch q.qid {
	case -1:
		return "queue (no Connect seen)"
	case 0:
		return "admin queue"
	}
	return fmt.Sprintf("I/O queue %d", q.qid)
}

// errorf is an error of the route's queue.
func (q *nvmeQueue) errorf(format string, args ...any) error {
	return fmt.Errorf("route %q: nvme %s: "+format, append([]any{q.route, q.queueLocked()}, args...)...)
}
