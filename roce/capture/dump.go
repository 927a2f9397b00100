package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Format is how Dump renders records.
type Format int

// Formats.
const (
	Text Format = iota // Record.Text, one line per packet
	JSON               // one JSON object per packet per line
)

// Stats counts the packets of a capture by what Decode made of them.
type Stats struct {
	Packets   int
	RoCE      int // UDP to port 4791, whatever else is wrong with them
	Other     int // not RoCEv2
	Malformed int // RoCEv2 with a malformed header
	BadICRC   int
	Cut       int // cut by the capture's snap length
}

// Add counts r.
func (s *Stats) Add(r *Record) {
	s.Packets++
	switch {
	case !r.RoCE:
		s.Other++
	case r.cut:
		s.RoCE++
		s.Cut++
	case r.ICRCBad():
		s.RoCE++
		s.BadICRC++
	case r.Error != "":
		s.RoCE++
		s.Malformed++
	default:
		s.RoCE++
	}
}

// String is the summary line rbridge decode prints.
func (s Stats) String() string {
	return fmt.Sprintf("%d packets: %d RoCEv2, %d other, %d malformed, %d bad ICRC, %d cut by the capture",
		s.Packets, s.RoCE, s.Other, s.Malformed, s.BadICRC, s.Cut)
}

// Dump reads the capture in r and writes one record per packet to w in
// format f. It returns what it counted, and an error when the capture could
// not be read to its end (the counts are of the packets before it).
func Dump(w io.Writer, r io.Reader, f Format) (Stats, error) {
	var st Stats
	cr, err := NewReader(r)
	if err != nil {
		return st, err
	}
	enc := json.NewEncoder(w)
	for {
		p, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("after packet %d: %w", st.Packets, err)
		}
		rec := Decode(st.Packets+1, p)
		st.Add(rec)
		if f == JSON {
			err = enc.Encode(rec)
		} else {
			_, err = io.WriteString(w, rec.Text()+"\n")
		}
		if err != nil {
			return st, err
		}
	}
}
