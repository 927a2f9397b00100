package leg

import "github.com/rbridge/rbridge/bridge/session"

// opSlots names the ops an endpoint has posted by work request ID, so a
// completion finds its op. Its user guards it with the endpoint's mutex.
type opSlots struct {
	ops  []*session.Op // by ID; nil when free
	free []uint32      // IDs free, a stack
}

func newOpSlots(n int) opSlots {
	s := opSlots{ops: make([]*session.Op, n), free: make([]uint32, n)}
	for i := range s.free {
		s.free[i] = uint32(n - 1 - i)
	}
	return s
}

// size is how many ops can be posted at once; available how many more.
func (s *opSlots) size() int      { return len(s.ops) }
func (s *opSlots) available() int { return len(s.free) }

// take gives op an ID; the caller checked available.
func (s *opSlots) Take(op *session.Op) uint32 {
	id := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.ops[id] = op
	return id
}

// done frees id and returns its op, nil when it held none.
func (s *opSlots) done(id uint64) *session.Op {
	if id >= uint64(len(s.ops)) {
		return nil
	}
	op := s.ops[id]
	if op != nil {
		s.ops[id] = nil
		s.free = append(s.free, uint32(id))
	}
	return op
}
