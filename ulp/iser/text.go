package iser

import "bytes"

// Login and Text PDUs carry text: key=value pairs, each ended by a NUL
// (RFC 7143, 6.1). A pair may continue into the next PDU (the Continue
// flag): a parser takes the text of a PDU sequence whole.

// NextKey parses the first key=value pair of b: the key and value as
// views of b, and the bytes the pair took with its NUL. A last pair
// without its NUL is an error: the text goes on in another PDU, or is
// cut.
func NextKey(b []byte) (key, value []byte, n int, err error) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return nil, nil, 0, &Error{Op: "parse text", Err: ErrText, Detail: "a pair without its NUL: " + quote(b)}
	}
	eq := bytes.IndexByte(b[:end], '=')
	if eq <= 0 {
		return nil, nil, 0, &Error{Op: "parse text", Err: ErrText, Detail: "not key=value: " + quote(b[:end])}
	}
	return b[:eq:eq], b[eq+1 : end : end], end + 1, nil
}

// AppendKey appends key=value and its NUL to b.
func AppendKey(b []byte, key, value string) []byte {
	return append(append(append(append(b, key...), '='), value...), 0)
}

func quote(b []byte) string {
	const max = 64
	s := string(b)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return "\"" + s + "\""
}
