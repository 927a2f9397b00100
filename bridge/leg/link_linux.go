//go:build linux

package leg

import (
	"encoding/binary"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/netns"
)

// operStates are the kernel's operational states by their IF_OPER_ value
// (include/uapi/linux/if.h, RFC 2863), named as /sys/class/net/*/operstate
// names them.
var operStates = [...]string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}

// operState returns the operational state of interface name in network
// namespace ns ("": the gateway's own), from the kernel's link table
// (netlink: sysfs shows the namespace it was mounted in, not the leg's).
func OperState(ns, name string) (string, error) {
	var state string
	err := netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
		if err != nil {
			return fmt.Errorf("netlink RTM_GETLINK: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(rib)
		if err != nil {
			return fmt.Errorf("netlink RTM_GETLINK: %w", err)
		}
		for i := range msgs {
			m := &msgs[i]
			// struct ifinfomsg: family, pad, type (16), index (32), ...
			if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg ||
				int(int32(binary.NativeEndian.Uint32(m.Data[4:8]))) != ifi.Index {
				continue
			}
			attrs, err := syscall.ParseNetlinkRouteAttr(m)
			if err != nil {
				return fmt.Errorf("netlink link %s: %w", name, err)
			}
			for _, a := range attrs {
				if a.Attr.Type == unix.IFLA_OPERSTATE && len(a.Value) == 1 {
					if int(a.Value[0]) < len(operStates) {
						state = operStates[a.Value[0]]
					} else {
						state = fmt.Sprintf("operstate %d", a.Value[0])
					}
					return nil
				}
			}
			return fmt.Errorf("netlink link %s: no operational state", name)
		}
		return fmt.Errorf("netlink: no link %s (index %d)", name, ifi.Index)
	})
	return state, err
}
