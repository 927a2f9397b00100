package harness

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// CPIOWriter writes a newc ("070701") cpio archive, the format the kernel
// unpacks as an initramfs. Parent directories are added on first use. It is
// used for the per-run overlay that the kernel unpacks after the cached base.
type CPIOWriter struct {
	w    io.Writer
	n    int64 // bytes written, for padding
	ino  uint32
	dirs map[string]bool
}

// NewCPIOWriter returns a writer that appends the archive to w.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: w, ino: 1, dirs: map[string]bool{".": true, "/": true, "": true}}
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

// Dir adds directory name (and its parents).
func (c *CPIOWriter) Dir(name string) error {
	name = clean(name)
	if c.dirs[name] {
		return nil
	}
	if err := c.Dir(path.Dir(name)); err != nil {
		return err
	}
	c.dirs[name] = true
	return c.entry(name, cpioDir|0o755, 0, nil)
}

// File adds a regular file of size bytes read from r, with permission bits perm.
func (c *CPIOWriter) File(name string, perm uint32, size int64, r io.Reader) error {
	name = clean(name)
	if err := c.Dir(path.Dir(name)); err != nil {
		return err
	}
	return c.entry(name, cpioFile|perm&0o7777, size, r)
}

// Symlink adds a symbolic link name pointing at target.
func (c *CPIOWriter) Symlink(name, target string) error {
	name = clean(name)
	if err := c.Dir(path.Dir(name)); err != nil {
		return err
	}
	return c.entry(name, cpioSymlink|0o777, int64(len(target)), strings.NewReader(target))
}

// Close writes the trailer. It does not close the underlying writer.
func (c *CPIOWriter) Close() error {
	return c.entry("TRAILER!!!", 0, 0, nil)
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (c *CPIOWriter) entry(name string, mode uint32, size int64, r io.Reader) error {
	if size > 0xffffffff {
		return fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, size)
	}
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	ino := c.ino
	c.ino++
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
	// rdevmajor, rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(hdr + name + "\x00")); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if size > 0 {
		n, err := io.CopyN(c.w, r, size)
		c.n += n
		if err != nil {
			return fmt.Errorf("cpio: %s: %w", name, err)
		}
	}
	return c.pad()
}

func (c *CPIOWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

// pad aligns the archive to 4 bytes, as newc requires after a header+name and after data.
func (c *CPIOWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}
