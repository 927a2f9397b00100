//go:build !amd64

package roce

// haveCLMUL is false off amd64: the ICRC takes the portable path.
const haveCLMUL = false

// icrcFold is only on amd64 (icrc_amd64.s); haveCLMUL keeps it from being
// called elsewhere.
func icrcFold(crc uint32, p []byte, mask *[icrcMaskLen]byte) uint32 {
	panic("roce: icrcFold without PCLMULQDQ")
}
