//go:build !linux

package doctor

import (
	"errors"
	"net/netip"
)

// hostSystem is the running host's System: RDMA and XDP are Linux's.
type hostSystem struct{}

var _ System = hostSystem{}

var errNotLinux = errors.New("doctor: needs Linux")

func (hostSystem) InNetns(name string, fn func() error) error {
	if name != "" {
		return errNotLinux
	}
	return fn()
}

func (hostSystem) DCB(string) (DCB, error)                 { return DCB{}, errNotLinux }
func (hostSystem) Driver(string) (string, error)           { return "", errNotLinux }
func (hostSystem) Addrs() (map[string][]netip.Addr, error) { return nil, errNotLinux }
