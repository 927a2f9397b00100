package harness

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Key hashes the inputs of a cached artifact (kernel version, package
// versions, script contents) into a short hex name. Each part is length
// prefixed, so moving bytes from one part to the next changes the key.
func Key(parts ...string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
