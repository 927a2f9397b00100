package srp

// TskMgmt is an SRP_TSK_MGMT, a task management function the initiator
// asks of the target (struct srp_tsk_mgmt): 48 bytes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  opcode 0x01  |    sol_not    |           reserved            |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (8 bytes)                                |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  LUN (8 bytes)                                | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           reserved            | tsk_mgmt_func |   reserved    | 28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  task_tag (8 bytes)                           | 32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved (8 bytes)                           | 40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The target answers with an SRP_RSP of the same tag (Rsp.TaskMgmtStatus).
// task_tag names the command an ABORT TASK aborts, by that command's
// tag; the Linux initiator sends ABORT TASK and LUN RESET (with
// TagNoRequest), tags them with TagTaskMgmt set (srp_send_tsk_mgmt), and
// the Linux target hands task_tag to the SCSI target core, which looks
// the command up by it (srpt_handle_tsk_mgmt, target_submit_tmr).
type TskMgmt []byte

const (
	tskSolNot  = 1
	tskTag     = 8
	tskLUN     = 20
	tskFunc    = 30
	tskTaskTag = 32
)

// Task management functions (SRP_TSK_* in srp.h).
const (
	TskAbortTask    = 0x01
	TskAbortTaskSet = 0x02
	TskClearTaskSet = 0x04
	TskLUNReset     = 0x08
	TskClearACA     = 0x40
)

// ParseTskMgmt checks that b starts with an SRP_TSK_MGMT and returns a
// view of it and its length.
func ParseTskMgmt(b []byte) (TskMgmt, int, error) {
	h, err := fixed(b, OpTskMgmt, &tskMgmtLayout)
	if err != nil {
		return nil, 0, err
	}
	return TskMgmt(h), TskMgmtLen, nil
}

// IsValid reports whether t holds a whole SRP_TSK_MGMT.
func (t TskMgmt) IsValid() bool { return len(t) >= TskMgmtLen }

func (t TskMgmt) SolNot() uint8 { return t[tskSolNot] }
func (t TskMgmt) Tag() uint64   { return tag(t, tskTag) }
func (t TskMgmt) LUN() uint64   { return be64(t, tskLUN) }

// Function is the task management function (Tsk*).
func (t TskMgmt) Function() uint8 { return t[tskFunc] }

// TaskTag is the tag of the command the function names.
func (t TskMgmt) TaskTag() uint64 { return tag(t, tskTaskTag) }
