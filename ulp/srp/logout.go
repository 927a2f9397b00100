package srp

// ILogout is an SRP_I_LOGOUT, the initiator's logout (struct
// srp_i_logout): 16 bytes, the opcode and the tag at 8. The Linux
// initiator never sends one (it disconnects the CM connection), and the
// Linux target logs it as not implemented (srpt_handle_new_iu).
type ILogout []byte

// TLogout is an SRP_T_LOGOUT, the target's logout (struct srp_t_logout):
// 16 bytes, the opcode, sol_not at 1, the reason at 4 and the tag at 8.
// The Linux target never sends one; the Linux initiator logs it
// (srp_recv_done).
type TLogout []byte

const (
	logoutSolNot = 1
	logoutReason = 4
	logoutTag    = 8
)

// ParseILogout checks that b starts with an SRP_I_LOGOUT and returns a
// view of it and its length.
func ParseILogout(b []byte) (ILogout, int, error) {
	h, err := fixed(b, OpILogout, &iLogoutLayout)
	if err != nil {
		return nil, 0, err
	}
	return ILogout(h), ILogoutLen, nil
}

// IsValid reports whether l holds a whole SRP_I_LOGOUT.
func (l ILogout) IsValid() bool { return len(l) >= ILogoutLen }
func (l ILogout) Tag() uint64   { return tag(l, logoutTag) }

// ParseTLogout checks that b starts with an SRP_T_LOGOUT and returns a
// view of it and its length.
func ParseTLogout(b []byte) (TLogout, int, error) {
	h, err := fixed(b, OpTLogout, &tLogoutLayout)
	if err != nil {
		return nil, 0, err
	}
	return TLogout(h), TLogoutLen, nil
}

// IsValid reports whether l holds a whole SRP_T_LOGOUT.
func (l TLogout) IsValid() bool  { return len(l) >= TLogoutLen }
func (l TLogout) SolNot() uint8  { return l[logoutSolNot] }
func (l TLogout) Reason() uint32 { return be32(l, logoutReason) }
func (l TLogout) Tag() uint64    { return tag(l, logoutTag) }
