package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Header precedes every frame.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |               Reserved (zero)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Body length                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type Header []byte

// HeaderLen is the length of a Header.
const HeaderLen = 8

const (
	hdrType = 0
	hdrLen  = 4
)

// Type is a frame's type.
type Type uint8

// Frame types.
const (
	TypeOpen       Type = 1
	TypeAccept     Type = 2
	TypeReject     Type = 3
	TypeOp         Type = 4
	TypeCompletion Type = 5
	TypeClose      Type = 6
)

var typeNames = [...]string{TypeOpen: "Open", TypeAccept: "Accept", TypeReject: "Reject", TypeOp: "Op",
	TypeCompletion: "Completion", TypeClose: "Close"}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// fixedLen is each type's fixed body part.
var fixedLen = [...]int{TypeOpen: openLen, TypeAccept: acceptLen, TypeReject: rejectLen, TypeOp: opLen,
	TypeCompletion: completionLen, TypeClose: closeLen}

// FixedLen returns the length of t's fixed body part (0 for an unknown type).
func FixedLen(t Type) int {
	if int(t) < len(fixedLen) {
		return fixedLen[t]
	}
	return 0
}

// Limits of the variable parts.
const (
	// MaxPrivateData bounds Open's, Accept's and Reject's private data
	// (the IB CM's REQ carries 92 bytes, its REP 196).
	MaxPrivateData = 256
	// MaxPayload bounds an Op's payload and a READ's length.
	MaxPayload = 1 << 20
	// MaxReason bounds Close's text.
	MaxReason = 256
)

// maxVariable is the largest variable part of each type.
var maxVariable = [...]int{TypeOpen: MaxPrivateData, TypeAccept: MaxPrivateData, TypeReject: MaxPrivateData,
	TypeOp: MaxPayload, TypeCompletion: MaxPayload, TypeClose: MaxReason}

// ErrFrame matches every malformed frame.
var ErrFrame = errors.New("malformed tunnel frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFrame, fmt.Sprintf(format, args...))
}

// IsValid reports whether b holds a Header.
func (h Header) IsValid() bool { return len(h) >= HeaderLen }

// Type returns the frame's type.
func (h Header) Type() Type { return Type(h[hdrType]) }

// BodyLen returns the length of the body that follows.
func (h Header) BodyLen() uint32 { return binary.BigEndian.Uint32(h[hdrLen:]) }

// Encode writes every byte of the header; the reserved bytes are zero.
func (h Header) Encode(t Type, bodyLen int) {
	h[hdrType] = byte(t)
	h[1], h[2], h[3] = 0, 0, 0
	binary.BigEndian.PutUint32(h[hdrLen:], uint32(bodyLen))
}

// appendHeader appends a header for a body of n bytes.
func appendHeader(b []byte, t Type, n int) []byte {
	b = append(b, byte(t), 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(n))
	return b
}

// ParseHeader checks the header at the start of b: a known type and a
// body length that holds the type's fixed part and no more than its
// largest variable part. It returns the type and the body's length.
func ParseHeader(b []byte) (Type, int, error) {
	if len(b) < HeaderLen {
		return 0, 0, malformed("header: %d bytes, want %d", len(b), HeaderLen)
	}
	h := Header(b)
	t := h.Type()
	fixed := FixedLen(t)
	if fixed == 0 {
		return 0, 0, malformed("unknown frame type %d", uint8(t))
	}
	n := h.BodyLen()
	if n < uint32(fixed) || n > uint32(fixed+maxVariable[t]) {
		return 0, 0, malformed("%v frame: body of %d bytes, want %d to %d", t, n, fixed, fixed+maxVariable[t])
	}
	return t, int(n), nil
}

// checkBody checks that body is a t frame's whole body.
func checkBody(t Type, body []byte) error {
	fixed := fixedLen[t]
	if len(body) < fixed {
		return malformed("%v frame: %d bytes, want at least %d", t, len(body), fixed)
	}
	if len(body)-fixed > maxVariable[t] {
		return malformed("%v frame: %d bytes after the fixed part, at most %d", t, len(body)-fixed, maxVariable[t])
	}
	return nil
}

// MaxFixedLen is the largest fixed part of any frame type (Op's).
const MaxFixedLen = opLen

// ReadFrame reads the next frame's header and fixed part from r into buf
// (at least HeaderLen+MaxFixedLen bytes) and checks the header. It
// returns the type, the fixed part (in buf) and how many bytes of the
// variable part follow, which the caller reads next (into a payload's own
// buffer, say). An io.EOF before the first byte is returned as is.
func ReadFrame(r io.Reader, buf []byte) (Type, []byte, int, error) {
	if len(buf) < HeaderLen+MaxFixedLen {
		return 0, nil, 0, fmt.Errorf("tunnel: read frame: a buffer of %d bytes, want %d", len(buf), HeaderLen+MaxFixedLen)
	}
	if _, err := io.ReadFull(r, buf[:HeaderLen]); err != nil {
		return 0, nil, 0, err
	}
	t, n, err := ParseHeader(buf[:HeaderLen])
	if err != nil {
		return 0, nil, 0, err
	}
	fixed := buf[HeaderLen : HeaderLen+fixedLen[t]]
	if _, err := io.ReadFull(r, fixed); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, 0, fmt.Errorf("tunnel: %v frame cut short: %w", t, err)
	}
	return t, fixed, n - len(fixed), nil
}

// ReadMessage reads one whole frame whose type is among types (the
// connection-management frames: Open, Accept, Reject, Close; an Op's
// payload is for the caller to read where it goes) and returns its type
// and body. Another type is an ErrFrame.
func ReadMessage(r io.Reader, types ...Type) (Type, []byte, error) {
	buf := make([]byte, HeaderLen+MaxFixedLen)
	t, fixed, rest, err := ReadFrame(r, buf)
	if err != nil {
		return 0, nil, err
	}
	if !slices.Contains(types, t) {
		return 0, nil, malformed("a %v frame, want one of %v", t, types)
	}
	body := make([]byte, len(fixed)+rest)
	copy(body, fixed)
	if _, err := io.ReadFull(r, body[len(fixed):]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, fmt.Errorf("tunnel: %v frame cut short: %w", t, err)
	}
	return t, body, nil
}
