package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/netns"
)

// checkHost looks on the host for what the file asks of it, before
// anything starts (run --check, and run itself): every leg's interface or
// device (bridge.CheckLegs), an AF_XDP leg's Ethernet address, a quic
// leg's address on this host, and the admin server's port free. It
// returns every problem it found, each with the line it comes from.
func checkHost(cfg *config.Config) error {
	var errs []error
	for i := range cfg.Legs {
		l := &cfg.Legs[i]
		// One leg at a time (with the leg a quic leg runs over), so that a
		// failure is known to be this leg's.
		one := *cfg
		one.Legs = []config.Leg{*l}
		if v, ok := cfg.Leg(l.Over); ok {
			one.Legs = append(one.Legs, *v)
		}
		if err := bridge.CheckLegs(&one); err != nil {
			if l.Kind == config.KindVerbs {
				err = fmt.Errorf("%w\n  (rbridge devices lists the RDMA devices and the GID rbridge would choose for each local IP, and rbridge doctor --config %s checks the fabric: an InfiniBand leg's ip is its port's IPoIB interface's address, a RoCE leg's the address of the port's netdev)", err, cfg.File())
			}
			errs = append(errs, err)
			continue
		}
		switch {
		case l.Kind == config.KindUserspace && l.IO == config.IOAFXDP:
			if err := netns.Do(l.Netns, func() error {
				ifi, err := net.InterfaceByName(l.Interface)
				if err != nil {
					return nil // CheckLegs said so
				}
				if len(ifi.HardwareAddr) != 6 {
					return fmt.Errorf("%s:%d: leg %q: io afxdp on interface %s, which has no Ethernet address (%d bytes: loopback, a tunnel or an IPoIB device): AF_XDP sends Ethernet frames; give the leg an Ethernet interface, or io: udp", cfg.File(), l.Line(), l.Name, l.Interface, len(ifi.HardwareAddr))
				}
				return nil
			}); err != nil {
				errs = append(errs, err)
			}
		case l.Kind == config.KindQUIC && l.Over == "":
			if err := canBindUDP(l.IP); err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: leg %q: ip %v: %w (a quic leg's socket is bound to its ip, which must be one of this host's addresses)", cfg.File(), l.Line(), l.Name, l.IP, err))
			}
		}
	}
	if err := checkAdminPort(cfg); err != nil {
		errs = append(errs, err)
	}
	if err := checkControl(cfg); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkControl reports whether the control socket can be made at its
// path (bridge.CheckControl), making nothing.
func checkControl(cfg *config.Config) error {
	if cfg.Admin.Control == "" {
		return nil
	}
	if err := bridge.CheckControl(cfg.Admin.Control); err != nil {
		return controlError(cfg, err)
	}
	return nil
}

// controlError names the control socket that could not be made, at its
// line, or as the default when the file has none.
func controlError(cfg *config.Config, err error) error {
	if inner := errors.Unwrap(err); inner != nil && strings.HasPrefix(err.Error(), "bridge: control socket") {
		err = inner
	}
	a := &cfg.Admin
	if a.ControlLine() == 0 {
		return fmt.Errorf("%s: admin: control %s (the default: the file has no admin.control): %w (admin.control \"\" turns the socket off: reload by SIGHUP then)", cfg.File(), a.Control, err)
	}
	return fmt.Errorf("%s:%d: admin: control %s: %w", cfg.File(), a.ControlLine(), a.Control, err)
}

// canBindUDP reports whether a UDP socket can be bound to ip.
func canBindUDP(ip netip.Addr) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		var se interface{ Unwrap() error }
		if errors.As(err, &se) {
			return se.Unwrap()
		}
		return err
	}
	return c.Close()
}

// checkAdminPort reports whether the admin server's address can be
// listened on (a port the kernel picks always can).
func checkAdminPort(cfg *config.Config) error {
	a := &cfg.Admin
	if a.Listen == "" || a.Addr().Port() == 0 {
		return nil
	}
	network := "tcp"
	if a.Addr().Addr().Is4() {
		network = "tcp4" // as the admin server listens: 0.0.0.0 is IPv4's alone
	}
	ln, err := net.Listen(network, a.Listen)
	if err != nil {
		return adminListenError(cfg, err)
	}
	return ln.Close()
}

// adminListenError names the admin server's address that could not be
// listened on, at its line, or as the default when the file has none.
func adminListenError(cfg *config.Config, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	a := &cfg.Admin
	if a.Line() == 0 {
		return fmt.Errorf("%s: admin: listen %s (the default: the file has no admin key): %w; give admin.listen another address, or \"\" for no admin server", cfg.File(), a.Listen, err)
	}
	return fmt.Errorf("%s:%d: admin: listen %s: %w", cfg.File(), a.Line(), a.Listen, err)
}
