package doctor

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// dcbnl, the DCB netlink interface (include/uapi/linux/dcbnl.h): an
// RTM_GETDCB request with DCB_CMD_IEEE_GET for an interface is answered
// with DCB_ATTR_IEEE, which nests the PFC state (struct ieee_pfc) and the
// APP table (struct dcb_app entries); a driver without DCB operations
// answers EOPNOTSUPP.
const (
	dcbCmdIEEEGet     = 21 // DCB_CMD_IEEE_GET
	dcbAttrIfname     = 1  // DCB_ATTR_IFNAME
	dcbAttrIEEE       = 13 // DCB_ATTR_IEEE
	dcbAttrIEEEPFC    = 2  // DCB_ATTR_IEEE_PFC
	dcbAttrIEEEApps   = 3  // DCB_ATTR_IEEE_APP_TABLE
	dcbAttrIEEEApp    = 1  // DCB_ATTR_IEEE_APP
	dcbAppSelDSCP     = 5  // IEEE_8021QAZ_APP_SEL_DSCP
	nlmsgHdrLen       = 16
	dcbmsgLen         = 4
	nlaHdrLen         = 4
	rtmGetDCB         = 78 // RTM_GETDCB
	nlmsgError        = 2  // NLMSG_ERROR
	ieeePFCMinLen     = 2  // pfc_cap, pfc_en
	dcbAppLen         = 4  // selector, priority, protocol (u16)
	nlmFRequest       = 1
	ieeeAppTableDepth = 64 // entries read at most
)

// dcbRequest builds the RTM_GETDCB request for ifname.
func dcbRequest(ifname string, seq uint32) []byte {
	name := append([]byte(ifname), 0)
	attrLen := nlaHdrLen + len(name)
	n := nlmsgHdrLen + dcbmsgLen + align4(attrLen)
	b := make([]byte, n)
	binary.NativeEndian.PutUint32(b[0:], uint32(n))
	binary.NativeEndian.PutUint16(b[4:], rtmGetDCB)
	binary.NativeEndian.PutUint16(b[6:], nlmFRequest)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b[nlmsgHdrLen] = syscall.AF_UNSPEC
	b[nlmsgHdrLen+1] = dcbCmdIEEEGet
	a := b[nlmsgHdrLen+dcbmsgLen:]
	binary.NativeEndian.PutUint16(a[0:], uint16(attrLen))
	binary.NativeEndian.PutUint16(a[2:], dcbAttrIfname)
	copy(a[nlaHdrLen:], name)
	return b
}

func align4(n int) int { return (n + 3) &^ 3 }

// parseDCBReply parses the answer to dcbRequest: one netlink message, an
// RTM_GETDCB reply or an error (EOPNOTSUPP: ErrNotExposed).
func parseDCBReply(b []byte) (DCB, error) {
	if len(b) < nlmsgHdrLen {
		return DCB{}, fmt.Errorf("dcbnl reply of %d bytes: shorter than a netlink header", len(b))
	}
	n := int(binary.NativeEndian.Uint32(b[0:]))
	typ := binary.NativeEndian.Uint16(b[4:])
	if n < nlmsgHdrLen || n > len(b) {
		return DCB{}, fmt.Errorf("dcbnl reply: message length %d in %d bytes", n, len(b))
	}
	body := b[nlmsgHdrLen:n]
	switch typ {
	case nlmsgError:
		if len(body) < 4 {
			return DCB{}, fmt.Errorf("dcbnl reply: a netlink error of %d bytes", len(body))
		}
		errno := -int32(binary.NativeEndian.Uint32(body))
		if errno == 0 {
			return DCB{}, fmt.Errorf("dcbnl reply: an acknowledgement, not the DCB state")
		}
		if syscall.Errno(errno) == syscall.EOPNOTSUPP {
			return DCB{}, fmt.Errorf("dcbnl: %w", ErrNotExposed)
		}
		return DCB{}, fmt.Errorf("dcbnl: %w", syscall.Errno(errno))
	case rtmGetDCB:
	default:
		return DCB{}, fmt.Errorf("dcbnl reply: message type %d, want %d (RTM_GETDCB)", typ, rtmGetDCB)
	}
	if len(body) < dcbmsgLen {
		return DCB{}, fmt.Errorf("dcbnl reply: %d bytes, shorter than struct dcbmsg", len(body))
	}
	var d DCB
	found := false
	err := attrs(body[dcbmsgLen:], func(typ uint16, v []byte) error {
		if typ != dcbAttrIEEE {
			return nil
		}
		found = true
		return attrs(v, func(typ uint16, v []byte) error {
			switch typ {
			case dcbAttrIEEEPFC:
				if len(v) < ieeePFCMinLen {
					return fmt.Errorf("DCB_ATTR_IEEE_PFC of %d bytes", len(v))
				}
				d.PFCCap, d.PFCEnabled = v[0], v[1]
			case dcbAttrIEEEApps:
				return attrs(v, func(typ uint16, v []byte) error {
					if typ != dcbAttrIEEEApp {
						return nil
					}
					if len(v) < dcbAppLen {
						return fmt.Errorf("DCB_ATTR_IEEE_APP of %d bytes", len(v))
					}
					if v[0] == dcbAppSelDSCP && len(d.DSCP) < ieeeAppTableDepth {
						if d.DSCP == nil {
							d.DSCP = map[uint8]uint8{}
						}
						d.DSCP[uint8(binary.NativeEndian.Uint16(v[2:]))] = v[1]
					}
					return nil
				})
			}
			return nil
		})
	})
	if err != nil {
		return DCB{}, fmt.Errorf("dcbnl reply: %w", err)
	}
	if !found {
		return DCB{}, fmt.Errorf("dcbnl reply: no DCB_ATTR_IEEE: %w", ErrNotExposed)
	}
	return d, nil
}

// attrs calls f for each netlink attribute in b (type without the nested
// and byte-order flags).
func attrs(b []byte, f func(typ uint16, v []byte) error) error {
	for len(b) > 0 {
		if len(b) < nlaHdrLen {
			return fmt.Errorf("%d trailing bytes, shorter than an attribute header", len(b))
		}
		l := int(binary.NativeEndian.Uint16(b[0:]))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff
		if l < nlaHdrLen || l > len(b) {
			return fmt.Errorf("attribute %d: length %d in %d bytes", typ, l, len(b))
		}
		if err := f(typ, b[nlaHdrLen:l]); err != nil {
			return err
		}
		b = b[min(align4(l), len(b)):]
	}
	return nil
}
