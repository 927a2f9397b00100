package udpconn

import (
	"fmt"
	"log/slog"
)

// Offload says which of the kernel's UDP batching a conn uses, and why not
// where it does not.
//
// GSO (UDP_SEGMENT, Linux 4.18): consecutive packets of one length (the
// last may be shorter) to one destination with one ECN, at most
// maxSegments of them and maxGSOBytes in all, go to the kernel as one
// send, which it (or the NIC) cuts into datagrams. IPv4 numbers the
// datagrams' IP IDs 0, 1, 2, ... and the conn computes each packet's ICRC
// for its own.
//
// GRO (UDP_GRO, Linux 5.0): the kernel hands datagrams of one flow that
// arrived together as one buffer and their length in a control message;
// the conn reads into buffers of its own large enough for one (64 KiB)
// and copies the packets out to the caller's.
type Offload struct {
	GSO, GRO bool
	// NoGSO and NoGRO say why one is off: the options turned it off, the
	// kernel refused it (and its error), or, for GSO, a send failed with
	// EIO. Empty while it is on.
	NoGSO, NoGRO string
}

// String is "gso on, gro on", or with the reason for one that is off.
func (o Offload) String() string {
	return fmt.Sprintf("gso %s, gro %s", onOff(o.GSO, o.NoGSO), onOff(o.GRO, o.NoGRO))
}

// LogValue logs the offload as a group: gso and gro, and why not.
func (o Offload) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Bool("gso", o.GSO), slog.Bool("gro", o.GRO)}
	if !o.GSO {
		attrs = append(attrs, slog.String("no_gso", o.NoGSO))
	}
	if !o.GRO {
		attrs = append(attrs, slog.String("no_gro", o.NoGRO))
	}
	return slog.GroupValue(attrs...)
}

func onOff(on bool, why string) string {
	if on {
		return "on"
	}
	return "off (" + why + ")"
}
