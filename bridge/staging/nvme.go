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
// Nothing is rewritten: remote invalidation is counted, for staging.
type nvmeQueue struct {
	route string
	host  int // the session direction of the host's messages
	stats *Stats
	log   *slog.Logger

	mu sync.Mutex // guards the fields below: both directions call at once
	// qid is the queue's ID, from its Connect (-1 until then).
	qid int
	// outstanding are the commands sent and not completed, by command ID.
	outstanding map[uint16]struct{}
	// scratch holds a capsule whose bytes ParseCapsule needs do not lie
	// in the message's first piece (kept while small).
	scratch []byte
	warned  [NumWhys]bool // the first of each in the session was logged
}

var _ session.Protocol = (*nvmeQueue)(nil)

// keepScratch bounds the scratch kept between messages: a capsule's SQE
// and a descriptor list always fit, in-capsule data usually does (the
// Linux target's default is 8 KiB).
const keepScratch = 16 << 10

func newNVMeQueue(o Options) *nvmeQueue {
	return &nvmeQueue{route: o.Route, host: o.Host, stats: o.Stats, log: o.Logger.With("protocol", config.ProtocolNVMe), qid: -1,
		outstanding: map[uint16]struct{}{}}
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
		q.noteLocked(WhyReusedCommandID, "a command whose ID is outstanding on its queue: relayed", "command_id", cid)
	}
	q.outstanding[cid] = struct{}{}
	m.Tag = uint64(cid)
	return nil
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
	cid := c.CommandID()
	if _, ok := q.outstanding[cid]; !ok {
		q.noteLocked(WhyUnknownCommandID, "a completion for no command outstanding on its queue: relayed", "command_id", cid, "status", c.Status())
		return nil
	}
	delete(q.outstanding, cid)
	return nil
}

// Sent implements session.Protocol: a command the controller never got
// (its SEND failed) is no longer outstanding.
func (q *nvmeQueue) Sent(dir int, tag uint64, status transport.Status) {
	if dir != q.host || status == transport.StatusSuccess {
		return
	}
	q.mu.Lock()
	delete(q.outstanding, uint16(tag))
	q.mu.Unlock()
}

// noteLocked counts why and logs its first occurrence in the session.
func (q *nvmeQueue) noteLocked(why Why, msg string, args ...any) {
	q.stats.Errors[why].Add(1)
	if q.warned[why] {
		return
	}
	q.warned[why] = true
	q.log.Warn(msg+" (further ones on this queue are counted only)", append(args, "queue", q.queueLocked(), "why", why.String())...)
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
