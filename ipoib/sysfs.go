package ipoib

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/rbridge/rbridge/ibv"
)

// sysfsNetdev reads one netdev's directory, sys/class/net/NAME, under a
// root standing for "/".
type sysfsNetdev struct {
	root fs.FS
	dir  string
}

func (h *Host) sysfs(name string) sysfsNetdev {
	return sysfsNetdev{root: h.root, dir: path.Join("sys/class/net", name)}
}

// read returns a file's content without surrounding white space.
func (s sysfsNetdev) read(name string) (string, error) {
	return readTrimmed(s.root, path.Join(s.dir, name))
}

// readInt reads a file holding one integer, in base (0: as Go literals,
// "0x1" included).
func (s sysfsNetdev) readInt(name string, base int) (int, error) {
	v, err := s.read(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, base, 32)
	if err != nil {
		return 0, fmt.Errorf("read /%s/%s: %q is not a number", s.dir, name, v)
	}
	return int(n), nil
}

// readDir returns the names in a directory, sorted.
func (s sysfsNetdev) readDir(name string) ([]string, error) {
	return readDirNames(s.root, path.Join(s.dir, name))
}

// rdmaDevice returns the RDMA device of a port's own IPoIB interface: the
// one under the netdev's device (device/infiniband/DEV). ipoib_parent_init
// (drivers/infiniband/ulp/ipoib/ipoib_main.c) makes the HCA's parent
// device, the PCI function, the netdev's (SET_NETDEV_DEV(dev,
// ca->dev.parent)), and the ib_device's own sysfs directory is under that
// function's infiniband/. A P_Key child has no device link (only the
// parent's init sets one).
func (s sysfsNetdev) rdmaDevice() (string, error) {
	devs, err := s.readDir("device/infiniband")
	switch {
	case err != nil:
		return "", fmt.Errorf("no RDMA device: %w", err)
	case len(devs) > 1:
		return "", fmt.Errorf("several RDMA devices under /%s/device/infiniband: %v", s.dir, devs)
	}
	return devs[0], nil
}

// PortOf returns the RDMA device and port (1-based) of IPoIB interface
// name from the sysfs under root (standing for "/") alone, for a caller
// without netlink's answers (rbridge doctor on a captured tree): a port's
// own interface's from its device link and dev_port (or dev_id), a P_Key
// child's from its parent's (the parent file). Unlike Interfaces it does
// not look for the port by the GID in the interface's address. The error
// matches ErrNoPort.
func PortOf(root fs.FS, name string) (string, int, error) {
	sys := sysfsNetdev{root: root, dir: path.Join("sys/class/net", name)}
	if parent, err := sys.read("parent"); err == nil {
		sys.dir = path.Join("sys/class/net", parent)
		name = fmt.Sprintf("%s (P_Key child of %s)", name, parent)
	}
	dev, err := sys.rdmaDevice()
	if err != nil {
		return "", 0, fmt.Errorf("ipoib interface %s: %w: %w", name, ErrNoPort, err)
	}
	port, err := sys.devPort()
	if err != nil {
		return "", 0, fmt.Errorf("ipoib interface %s on %s: %w: %w", name, dev, ErrNoPort, err)
	}
	return dev, port, nil
}

// devPort returns the 1-based RDMA port of a port's own IPoIB interface:
// dev_port + 1, or dev_id + 1 when dev_port is 0 and dev_id is not (the
// kernels before dev_port, which the comment above ipoib_main.c's
// dev_id_show describes).
func (s sysfsNetdev) devPort() (int, error) {
	port, perr := s.readInt("dev_port", 10)
	if perr == nil && port > 0 {
		return port + 1, nil
	}
	id, ierr := s.readInt("dev_id", 0)
	switch {
	case ierr == nil && id > 0:
		return id + 1, nil
	case perr == nil:
		return port + 1, nil
	case ierr == nil:
		return id + 1, nil
	}
	return 0, errors.Join(perr, ierr)
}

// portGID0 reads GID index 0 of an RDMA port from
// sys/class/infiniband/DEV/ports/PORT/gids/0.
func (h *Host) portGID0(dev string, port int) (ibv.GID, error) {
	s, err := readTrimmed(h.root, path.Join("sys/class/infiniband", dev, "ports", strconv.Itoa(port), "gids/0"))
	if err != nil {
		return ibv.GID{}, err
	}
	return ibv.ParseGID(s)
}

// portByGID finds the RDMA port whose GID 0 is g.
func (h *Host) portByGID(g ibv.GID) (string, int, error) {
	devs, err := readDirNames(h.root, "sys/class/infiniband")
	if err != nil {
		return "", 0, err
	}
	for _, d := range devs {
		ports, err := readDirNames(h.root, path.Join("sys/class/infiniband", d, "ports"))
		if err != nil {
			continue
		}
		for _, p := range ports {
			port, err := strconv.Atoi(p)
			if err != nil {
				continue
			}
			if pg, err := h.portGID0(d, port); err == nil && pg == g {
				return d, port, nil
			}
		}
	}
	return "", 0, fmt.Errorf("looked at the ports of %d RDMA devices", len(devs))
}

func readTrimmed(root fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return "", fmt.Errorf("read /%s: %w", name, unwrapPathError(err))
	}
	return strings.TrimSpace(string(b)), nil
}

func readDirNames(root fs.FS, name string) ([]string, error) {
	ents, err := fs.ReadDir(root, name)
	if err != nil {
		return nil, fmt.Errorf("read /%s: %w", name, unwrapPathError(err))
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("read /%s: empty directory", name)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// unwrapPathError drops fs.PathError's own copy of the path, which the
// message names already (relative to the root, not as "/").
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
