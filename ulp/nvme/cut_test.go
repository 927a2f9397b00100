package nvme_test

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// TestCutAtEveryPrefix feeds every fixed-size parser every prefix of a
// valid structure: each must return ErrTruncated and n 0, never panic.
// (ParseCapsule has its own, TestCapsuleCutAtEveryPrefix.)
func TestCutAtEveryPrefix(t *testing.T) {
	// A Connect is valid as every structure but the rdma_cm private data,
	// whose record format must be 0.
	connect := make([]byte, nvme.ConnectDataLen)
	nvme.Connect(connect).Encode(&nvme.ConnectFields{QID: 1})
	cm := nvme.AppendCMRequest(nil, &nvme.CMRequestFields{QID: 1, HRQSize: 32, HSQSize: 31})
	parsers := map[string]struct {
		n     int
		parse func([]byte) (int, error)
	}{
		"command":     {nvme.CommandLen, func(b []byte) (int, error) { _, n, err := nvme.ParseCommand(b); return n, err }},
		"SGL":         {nvme.SGLLen, func(b []byte) (int, error) { _, n, err := nvme.ParseSGL(b); return n, err }},
		"completion":  {nvme.CompletionLen, func(b []byte) (int, error) { _, n, err := nvme.ParseCompletion(b); return n, err }},
		"connect":     {nvme.CommandLen, func(b []byte) (int, error) { _, n, err := nvme.ParseConnect(b); return n, err }},
		"connectdata": {nvme.ConnectDataLen, func(b []byte) (int, error) { _, n, err := nvme.ParseConnectData(b); return n, err }},
		"cmrequest":   {nvme.CMRequestLen, func(b []byte) (int, error) { _, n, err := nvme.ParseCMRequest(b); return n, err }},
		"cmreply":     {nvme.CMReplyLen, func(b []byte) (int, error) { _, n, err := nvme.ParseCMReply(b); return n, err }},
		"cmreject":    {nvme.CMRejectLen, func(b []byte) (int, error) { _, n, err := nvme.ParseCMReject(b); return n, err }},
	}
	for name, p := range parsers {
		valid := connect
		if name[:2] == "cm" {
			valid = cm
		}
		for i := range p.n {
			n, err := p.parse(valid[:i:i])
			var e *nvme.Error
			if !errors.Is(err, nvme.ErrTruncated) || n != 0 || !errors.As(err, &e) {
				t.Errorf("%s cut at %d: got n=%d err=%v, want 0, ErrTruncated", name, i, n, err)
			}
		}
		if n, err := p.parse(valid[:p.n]); err != nil || n != p.n {
			t.Errorf("%s full length: got n=%d err=%v", name, n, err)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	_, _, err := nvme.ParseCompletion(make([]byte, 3))
	if got, want := err.Error(), "nvme: parse completion: truncated: 3 bytes, need 16"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = nvme.ParseCapsule(capsule(t, nvme.OpRead, nvme.SGLFields{Type: nvme.SGLBitBucket}, nil))
	if got, want := err.Error(), "nvme: parse capsule: data pointer (byte 24): unsupported SGL descriptor type: bit bucket (identifier 0x10)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
