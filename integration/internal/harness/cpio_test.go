package harness

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readNewc decodes a newc archive into "name mode size content" lines, the
// way the kernel's initramfs unpacker reads it, checking the 4-byte alignment.
func readNewc(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d inside a header", off)
		}
		h := string(b[off : off+110])
		if !strings.HasPrefix(h, "070701") {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off += 110 + namesize
		align()
		data := string(b[off : off+size])
		off += size
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, fmt.Sprintf("%s %o %d %q", name, mode, size, data))
	}
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	cw := NewCPIOWriter(&buf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cw.File("/tests/ibv/test", 0o755, 5, strings.NewReader("ELF!!")))
	must(cw.File("tests/manifest", 0o644, 9, strings.NewReader("ibv x/ibv")))
	must(cw.Symlink("tests/ibv/src/testdata/link", "target"))
	must(cw.Dir("tests/ibv"))
	must(cw.Close())
	want := []string{
		`tests 40755 0 ""`,
		`tests/ibv 40755 0 ""`,
		`tests/ibv/test 100755 5 "ELF!!"`,
		`tests/manifest 100644 9 "ibv x/ibv"`,
		`tests/ibv/src 40755 0 ""`,
		`tests/ibv/src/testdata 40755 0 ""`,
		`tests/ibv/src/testdata/link 120777 6 "target"`,
	}
	if diff := cmp.Diff(want, readNewc(t, buf.Bytes())); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}
}

func TestCPIOWriterShortReader(t *testing.T) {
	cw := NewCPIOWriter(&bytes.Buffer{})
	if err := cw.File("f", 0o644, 10, strings.NewReader("short")); err == nil {
		t.Error("File with a reader shorter than size: no error")
	}
}
