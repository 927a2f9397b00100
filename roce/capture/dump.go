package capture

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rbridge/rbridge/roce"
)

// Format is how Dump renders records.
type Format int

// Formats.
const (
	Text Format = iota // Record.Text, one line per packet
	JSON               // one JSON object per packet per line
)

// Stats counts the packets of a capture by what Decode made of them:
// each is RoCEv2, malformed or other (Packets is their sum); BadICRC and
// Cut count some of the RoCEv2 ones.
type Stats struct {
	Packets   int
	RoCE      int // RoCEv2 whose headers decoded (or were cut by the capture)
	Other     int // not RoCEv2
	Malformed int // UDP to the RoCEv2 port whose headers do not decode
	BadICRC   int // RoCEv2 with an ICRC that does not match
	Cut       int // RoCEv2 cut by the capture's snap length
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
		s.Malformed++
	default:
		s.RoCE++
	}
}

// String is the summary line rbridge decode prints: "20 packets: 19
// RoCEv2 (1 with a bad ICRC, 1 cut by the capture), 0 malformed, 1 other".
func (s Stats) String() string {
	return fmt.Sprintf("%s: %d RoCEv2 (%d with a bad ICRC, %d cut by the capture), %d malformed, %d other",
		plural(s.Packets, "packet"), s.RoCE, s.BadICRC, s.Cut, s.Malformed, s.Other)
}

// plural is n things, "1 packet" or "2 packets".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// DumpOptions are Dump's: the format and RoCEv2's UDP port (0: 4791).
type DumpOptions struct {
	Format Format
	Port   uint16
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
	return DumpWith(w, r, DumpOptions{Format: f})
}

// DumpWith is Dump with options.
func DumpWith(w io.Writer, r *Reader, o DumpOptions) (Stats, error) {
	var st Stats
	bw := bufio.NewWriter(w)
	if o.Port == 0 {
		o.Port = roce.Port
	}
	err := dump(bw, r, o, &st)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return st, err
}

func dump(bw *bufio.Writer, cr *Reader, o DumpOptions, st *Stats) error {
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
		rec := DecodePort(st.Packets+1, p, o.Port)
		st.Add(rec)
		if o.Format == JSON {
			err = enc.Encode(rec)
		} else {
			_, err = bw.WriteString(rec.Text() + "\n")
		}
		if err != nil {
			return err
		}
	}
}
