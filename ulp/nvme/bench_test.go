package nvme_test

import (
	"fmt"
	"testing"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// rewrite is what the staging engine does to a capsule: parse it and point
// every keyed descriptor at staging memory.
func rewrite(b []byte, addr uint64, key uint32) error {
	c, err := nvme.ParseCapsule(b)
	if err != nil {
		return err
	}
	for i, d := range c.Keyed().All() {
		d.SetAddress(addr + uint64(i)<<20)
		d.SetKey(key)
		d.SetSubtype(nvme.SGLAddress)
	}
	return nil
}

func rewriteCapsules(t testing.TB) map[string][]byte {
	var list []nvme.SGLFields
	for i := range 8 {
		list = append(list, keyed(uint64(i)<<20, 4096, uint32(i), nvme.SGLAddress))
	}
	return map[string][]byte{
		"keyed":      capsule(t, nvme.OpRead, keyed(0x1000, 131072, 1, nvme.SGLInvalidate), nil),
		"list-8":     listCapsule(t, nvme.OpRead, list...),
		"in-capsule": inlineCapsule(t, nvme.OpWrite, make([]byte, 4096)),
	}
}

// TestRewriteDoesNotAllocate holds the hot path to zero allocations, by
// index and by range over All.
func TestRewriteDoesNotAllocate(t *testing.T) {
	for name, b := range rewriteCapsules(t) {
		if n := testing.AllocsPerRun(100, func() {
			if err := rewrite(b, 0x7f0000000000, 0xabcd); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: rewrite allocates %v times", name, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			c, _ := nvme.ParseCapsule(b)
			l := c.Keyed()
			for i := range l.Len() {
				l.At(i).SetKey(uint32(i))
			}
		}); n != 0 {
			t.Errorf("%s: rewrite by index allocates %v times", name, n)
		}
	}
}

// BenchmarkRewrite parses a command capsule and rewrites its keyed
// descriptors in place.
func BenchmarkRewrite(b *testing.B) {
	for _, name := range []string{"keyed", "list-8", "in-capsule"} {
		c := rewriteCapsules(b)[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(c)))
			b.ReportAllocs()
			for b.Loop() {
				if err := rewrite(c, 0x7f0000000000, 0xabcd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseCompletion reads a response capsule's status.
func BenchmarkParseCompletion(b *testing.B) {
	cqe := make([]byte, nvme.CompletionLen)
	nvme.Completion(cqe).Encode(&nvme.CompletionFields{CommandID: 3, Status: nvme.StatusDataXferError})
	b.ReportAllocs()
	for b.Loop() {
		c, _, err := nvme.ParseCompletion(cqe)
		if err != nil || c.Status().Success() {
			b.Fatal(fmt.Sprint(err))
		}
	}
}
