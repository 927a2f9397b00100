//go:build !linux

package udpbaseline

import (
	"errors"
	"net"
)

const (
	maxSegments = 1
	maxGSOBytes = 0
)

var errNoOffload = errors.New("UDP_SEGMENT and UDP_GRO are Linux's")

func probeGSO(*net.UDPConn) error  { return errNoOffload }
func enableGRO(*net.UDPConn) error { return errNoOffload }
func segmentControl(int) []byte    { return nil }
func groSegment([]byte) int        { return 0 }
func isGSORefused(error) bool      { return false }
