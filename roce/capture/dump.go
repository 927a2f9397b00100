package capture

import (
	"bufio"
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

// Dump reads the rest of the capture from r and writes one record per
// packet to w in format f. It returns what it counted, and an error when the
// capture could not be read to its end (the counts are of the packets
// before it).
//
// Dump follows a live capture: it writes the records it holds whenever its
// input has nothing more buffered, before it waits for more, so each line
// appears as its packet arrives; a file is written in large writes.
func Dump(w io.Writer, r *Reader, f Format) (Stats, error) {
	var st Stats
	bw := bufio.NewWriter(w)
	err := dump(bw, r, f, &st)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return st, err
}

func dump(bw *bufio.Writer, cr *Reader, f Format, st *Stats) error {
	enc := json.NewEncoder(bw)
	for {
		if cr.br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		p, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("after packet %d: %w", st.Packets, err)
		}
		rec := Decode(st.Packets+1, p)
		st.Add(rec)
		if f == JSON {
			err = enc.Encode(rec)
		} else {
			_, err = bw.WriteString(rec.Text() + "\n")
		}
		if err != nil {
			return err
		}
	}
}
