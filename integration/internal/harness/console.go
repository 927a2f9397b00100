package harness

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// marker starts every line of the guest's protocol (see integration/vm/init.sh).
const marker = "@@RB "

// Console reads the guest console line by line: it echoes a readable stream
// to Out, and collects the steps, test passes and baseline figures from the
// "@@RB " protocol lines. Feed it with Line; it keeps no goroutine.
type Console struct {
	Out io.Writer

	Kernel     string    // guest kernel version
	Step       string    // last setup step started
	Failure    string    // the message of a FAIL line
	Status     int       // exit status printed at the end
	StatusSeen bool      // whether the STATUS line came
	Passes     []*Pass   // ended test passes, in order
	Figures    []*Figure // ended baseline pairs, in order
	// Artifacts are the files test binaries left for the host, in the
	// order they ended.
	Artifacts []*Artifact
	Now       func() time.Time

	pass  *Pass                       // test pass being read
	fig   *Figure                     // baseline pair being read
	files map[string]*strings.Builder // artifacts being read (base64), by id, device and name
}

// Artifact is a file a test binary left in the guest for the host
// (integration/guest.Artifact), sent as base64 lines.
type Artifact struct {
	ID, Device, Name string
	Data             []byte
	// Err says the file did not arrive whole: a line that is not base64,
	// or a size or SHA-256 other than the guest's.
	Err error
}

var ansiEscape = regexp.MustCompile(`\x1b(\[[0-9;?]*[A-Za-z]|c)`)

// Line takes one console line, with or without its line ending.
func (c *Console) Line(line string) {
	line = strings.TrimRight(line, "\r\n")
	line = ansiEscape.ReplaceAllString(strings.ReplaceAll(line, "\r", ""), "")
	// Output that does not end in a newline runs into the next marker.
	if i := strings.Index(line, marker); i > 0 {
		c.content(line[:i])
		line = line[i:]
	}
	if rest, ok := strings.CutPrefix(line, marker); ok {
		c.marker(rest)
		return
	}
	c.content(line)
}

func (c *Console) printf(format string, a ...any) {
	if c.Out != nil {
		fmt.Fprintf(c.Out, format, a...)
	}
}

func (c *Console) content(line string) {
	switch {
	case c.pass != nil:
		if e, ok := parseEvent(line); ok {
			if c.Now != nil {
				e.Time = c.Now() // the host's clock: the guest's drifts under TCG
			}
			c.pass.event(e)
			if e.Action == "output" {
				c.printf("%s", e.Output)
			}
			return
		}
	case c.fig != nil:
		c.fig.Output = append(c.fig.Output, line)
	}
	c.printf("%s\n", line)
}

func (c *Console) marker(m string) {
	f := strings.Fields(m)
	if len(f) == 5 && f[0] == "FILE" {
		c.fileLine(f[1]+" "+f[2]+" "+f[3], f[4]) // not echoed: the file is kept whole instead
		return
	}
	c.printf("%s%s\n", marker, m)
	if len(f) == 0 {
		return
	}
	switch f[0] {
	case "FILE-END":
		if len(f) >= 4 {
			c.fileEnd(f[1], f[2], f[3], f[4:])
		}
	case "KERNEL":
		if len(f) > 1 {
			c.Kernel = f[1]
		}
	case "STEP":
		c.Step = strings.Join(f[1:], " ")
	case "FAIL":
		c.Failure = strings.TrimSpace(strings.TrimPrefix(m, "FAIL"))
	case "STATUS":
		c.Status, c.StatusSeen = attrInt(f[1:], "rc", 1), true
	case "BEGIN":
		if len(f) >= 3 {
			c.pass = newPass(f[1], f[2])
		}
	case "END":
		if c.pass != nil && len(f) >= 3 && f[1] == c.pass.ID && f[2] == c.pass.Device {
			c.pass.finish(attrInt(f[3:], "rc", -1))
			c.Passes = append(c.Passes, c.pass)
			c.printf("%s\n", c.pass.Summary())
			c.pass = nil
		}
	case "BASE":
		c.baseMarker(f[1:])
	}
}

func (c *Console) baseMarker(f []string) {
	if len(f) < 3 {
		return
	}
	switch f[0] {
	case "BEGIN":
		c.fig = &Figure{Tool: f[1], Kind: f[2]}
	case "RETRY":
		if c.fig != nil {
			c.fig.Retries++
			c.fig.Output = nil
		}
	case "END":
		if c.fig == nil || c.fig.Tool != f[1] || c.fig.Kind != f[2] {
			return
		}
		c.fig.RC = attrInt(f[3:], "rc", -1)
		c.fig.ElapsedMS = attrInt(f[3:], "elapsed_ms", 0)
		c.fig.Iters = attrInt(f[3:], "iters", 0)
		c.fig.GatewayCPUTicks = attrInt(f[3:], "gateway_cpu_ticks", -1)
		if c.fig.Tool != "rping" {
			c.fig.Columns = parsePerftest(c.fig.Output)
		}
		c.Figures = append(c.Figures, c.fig)
		c.fig = nil
	}
}

// attrInt returns the integer value of key=value in attrs, or def.
func attrInt(attrs []string, key string, def int) int {
	for _, a := range attrs {
		if v, ok := strings.CutPrefix(a, key+"="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				return n
			}
		}
	}
	return def
}

// Where says where the guest was, for a guest that hung or died: the step,
// and the test binary, device and tests that were running.
func (c *Console) Where() string {
	var b strings.Builder
	fmt.Fprintf(&b, "last step: %s", orNone(c.Step))
	if c.fig != nil {
		fmt.Fprintf(&b, "; in baseline %s over %s", c.fig.Tool, c.fig.Kind)
	}
	if p := c.pass; p != nil {
		fmt.Fprintf(&b, "; in %s on %s", p.Name(), p.Device)
		if running := p.Running(); len(running) > 0 {
			fmt.Fprintf(&b, ", running %s", strings.Join(running, ", "))
			if c.Now != nil {
				if t := p.running[running[len(running)-1]]; !t.IsZero() {
					fmt.Fprintf(&b, " (started %s before)", c.Now().Sub(t).Round(time.Second))
				}
			}
		} else {
			b.WriteString(", between tests")
		}
	} else if n := len(c.Passes); n > 0 {
		fmt.Fprintf(&b, "; last test binary ended: %s on %s", c.Passes[n-1].Name(), c.Passes[n-1].Device)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "none (the kernel did not reach /init)"
	}
	return s
}

// fileLine adds a line of base64 to the artifact key.
func (c *Console) fileLine(key, b64 string) {
	if c.files == nil {
		c.files = map[string]*strings.Builder{}
	}
	b := c.files[key]
	if b == nil {
		b = &strings.Builder{}
		c.files[key] = b
	}
	b.WriteString(b64)
}

// fileEnd decodes an artifact whose lines came, and checks it against the
// size and SHA-256 the guest sent.
func (c *Console) fileEnd(id, device, name string, attrs []string) {
	key := id + " " + device + " " + name
	a := &Artifact{ID: id, Device: device, Name: name}
	b64 := ""
	if b := c.files[key]; b != nil {
		b64 = b.String()
		delete(c.files, key)
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	sum := sha256.Sum256(data)
	want := ""
	for _, at := range attrs {
		if v, ok := strings.CutPrefix(at, "sha256="); ok {
			want = v
		}
	}
	switch {
	case err != nil:
		a.Err = fmt.Errorf("artifact %s of %s on %s: not base64: %w", name, id, device, err)
	case attrInt(attrs, "bytes", -1) != len(data):
		a.Err = fmt.Errorf("artifact %s of %s on %s: %d bytes arrived, the guest sent %d", name, id, device, len(data), attrInt(attrs, "bytes", -1))
	case hex.EncodeToString(sum[:]) != want:
		a.Err = fmt.Errorf("artifact %s of %s on %s: SHA-256 %x, the guest's %s", name, id, device, sum, want)
	default:
		a.Data = data
	}
	c.Artifacts = append(c.Artifacts, a)
}
