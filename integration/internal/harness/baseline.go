package harness

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Figure is one baseline measurement: an unmodified perftest or rping pair
// between two devices of one kind in the guest, or the same tool through
// rbridge run.
type Figure struct {
	Tool      string // ib_send_bw, ib_write_bw, ib_read_bw, ib_send_lat or rping
	Kind      string // rxe or siw; rbridge-<io> for a pair through the gateway
	RC        int    // exit status of the pair (client, else server)
	ElapsedMS int    // client wall time, connection setup included
	Iters     int    // iterations asked for
	Retries   int    // runs retried: perftest could not calibrate its clock, or its client beat the server's listener
	// GatewayCPUTicks is rbridge run's CPU time (user and system, in
	// clock ticks of 10 ms) during a pair through it; -1 for a direct pair.
	GatewayCPUTicks int
	Columns         map[string]string
	Output          []string // the client's output, shown when the pair failed
}

// OK reports whether the pair exited 0 and, for perftest, printed finite,
// non-zero results (perftest prints inf, nan or zeros when it could not
// calibrate its clock). A latency test's t_stdev is not one of them:
// perftest squares each round trip's distance from the average into an
// int, which overflows from 46.3 ms on, and prints -nan then (the guest
// under TCG has round trips through a busy-polled gateway of 60 ms and
// more); the table does not show it.
func (f *Figure) OK() bool {
	if f.RC != 0 {
		return false
	}
	if f.Tool == "rping" {
		return true
	}
	for k, v := range f.Columns {
		if k == stdevColumn {
			continue
		}
		if x, err := strconv.ParseFloat(v, 64); err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return false
		}
	}
	for _, name := range []string{"BW average[" + f.bwUnit() + "]", "t_typical[usec]"} {
		if x, err := strconv.ParseFloat(f.Columns[name], 64); err == nil && x <= 0 {
			return false
		}
	}
	return len(f.Columns) > 0
}

// stdevColumn is a latency test's standard deviation, which OK passes
// over.
const stdevColumn = "t_stdev[usec]"

// perftestColumn matches one name in perftest's results header: "#bytes",
// or a name that ends in a bracketed unit and may hold spaces
// ("BW average[MB/sec]", "99% percentile[usec]").
var perftestColumn = regexp.MustCompile(`#\S+|[^\s#][^\[]*\[[^\]]*\]`)

// ParsePerftest reads the results table of a perftest client (its output,
// line by line; the guest tests read their own clients' with it): the header
// line that starts with "#bytes" and the first line of numbers after it
// (perftest may print a warning between them), up to the table's closing
// dashes.
func ParsePerftest(lines []string) map[string]string {
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "#bytes") {
			continue
		}
		names := perftestColumn.FindAllString(t, -1)
		for _, row := range lines[i+1:] {
			values := strings.Fields(row)
			if len(values) > 0 && strings.HasPrefix(values[0], "---") {
				break
			}
			if len(values) == 0 {
				continue
			}
			if _, err := strconv.ParseFloat(values[0], 64); err != nil {
				continue
			}
			if len(values) != len(names) {
				break
			}
			cols := make(map[string]string, len(names))
			for j, n := range names {
				cols[n] = values[j]
			}
			return cols
		}
	}
	return nil
}

// bwUnit returns the unit of a bandwidth table ("MB/sec", "Gb/sec"), or "".
func (f *Figure) bwUnit() string {
	for name := range f.Columns {
		if u, ok := strings.CutPrefix(name, "BW average["); ok {
			return strings.TrimSuffix(u, "]")
		}
	}
	return ""
}

// Size is the message size in bytes, as perftest printed it ("64" for rping).
func (f *Figure) Size() string {
	if f.Tool == "rping" {
		return "64"
	}
	return f.Columns["#bytes"]
}

// Result is the figure in words, e.g. "29.48 MB/sec average (peak 30.06)".
func (f *Figure) Result() string {
	if !f.OK() {
		if f.RC == 0 {
			return "FAILED (no usable figures: perftest could not calibrate its clock)"
		}
		return fmt.Sprintf("FAILED (exit status %d)", f.RC)
	}
	if f.Tool == "rping" {
		return fmt.Sprintf("ok: %d ping-pongs (RDMA READ+WRITE each)", f.Iters)
	}
	if u := f.bwUnit(); u != "" {
		return fmt.Sprintf("%s %s average (peak %s), %s Mpps",
			f.Columns["BW average["+u+"]"], u, f.Columns["BW peak["+u+"]"], f.Columns["MsgRate[Mpps]"])
	}
	if typ, ok := f.Columns["t_typical[usec]"]; ok {
		return fmt.Sprintf("%s usec typical, %s average, %s p99", typ, f.Columns["t_avg[usec]"], f.Columns["99% percentile[usec]"])
	}
	return "ok"
}

func (f *Figure) wall() string { return fmt.Sprintf("%.1f s", float64(f.ElapsedMS)/1000) }

// gatewayCPU is the gateway's CPU time per iteration, or "-" for a direct
// pair.
func (f *Figure) gatewayCPU() string {
	if f.GatewayCPUTicks < 0 || f.Iters <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f us/op", float64(f.GatewayCPUTicks)*10000/float64(f.Iters))
}

// note says what the reader must know beside the figure.
func (f *Figure) note() string {
	if f.Retries == 0 {
		return ""
	}
	return fmt.Sprintf(" [retried %dx: see the console]", f.Retries)
}

// BaselineTable renders the figures as the aligned text table printed at the
// end of `make integration`.
func BaselineTable(figs []*Figure) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BASELINE\tover\tbytes\titers\twall\tgateway CPU\tresult")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s%s\n", f.Tool, f.Kind, f.Size(), f.Iters, f.wall(), f.gatewayCPU(), f.Result(), f.note())
	}
	tw.Flush()
	return b.String()
}

// BaselineHeading is the section of docs/performance.md that the baseline owns.
const BaselineHeading = "## Direct-path baseline in the guest (TCG)"

// BaselineMarkdown renders the section, heading included. kernel is the
// guest's kernel version and hostLoad the host's load averages at the end of
// the run (from /proc/loadavg); either may be empty.
func BaselineMarkdown(figs []*Figure, kernel, hostLoad string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", BaselineHeading)
	b.WriteString("Unmodified perftest (`-R`, rdma_cm) and rping between two devices of the same kind in\n" +
		"the integration guest, written by `make baseline-docs`. The guest runs under qemu TCG\n" +
		"(no KVM), roughly 100x slower than native: these figures are the reference that the\n" +
		"gateway's paths are compared against in the same guest, not absolute speeds.\n" +
		"The rows over rbridge-afxdp are the same tools in the same run through `rbridge run`:\n" +
		"the client on rxe1 (the RoCE side), the server on rxe3 (the IB fabric, which the\n" +
		"RoCE side reaches only through the gateway), the gateway's userspace leg in user0 over\n" +
		"AF_XDP and its verbs leg on rxe2: two hops where the rxe rows have one. Gateway CPU is\n" +
		"rbridge run's own CPU time (user and system) per iteration, from /proc/<pid>/stat: it\n" +
		"holds the kernel work its system calls do (rxe2's requester runs in the poster's\n" +
		"context, a veth transmit can run the receiving side's stack), not the softirq work.\n")
	if kernel != "" {
		fmt.Fprintf(&b, "Guest kernel %s; rxe0 -> rxe1 and siw0 -> siw1 over veth.\n", kernel)
	}
	if hostLoad != "" {
		fmt.Fprintf(&b, "Host load average (1, 5, 15 min) at the end of the run: %s, on 2 cores: the\n"+
			"figures move with the host's other work, several-fold between runs on a busy host.\n", hostLoad)
	}
	b.WriteString("A pair marked \"retried\" failed its first run because perftest could not calibrate\n" +
		"its cycle counter under TCG (\"Can't produce a report\" or inf figures); the figure is\n" +
		"from the run that calibrated.\n")
	b.WriteString("\n| test | over | bytes | iterations | client wall | gateway CPU | result |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s%s |\n", f.Tool, f.Kind, f.Size(), f.Iters, f.wall(), f.gatewayCPU(), f.Result(), f.note())
	}
	return b.String()
}

// ReplaceSection returns doc with the level-2 section that starts with the
// heading line of section replaced by section (or section appended when doc
// has no such heading). Other sections are kept as they are.
func ReplaceSection(doc, section string) string {
	heading, _, _ := strings.Cut(section, "\n")
	section = strings.TrimRight(section, "\n") + "\n"
	lines := strings.SplitAfter(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\n") == heading {
			start = i
			break
		}
	}
	if start < 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + section
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") || strings.HasPrefix(lines[i], "# ") {
			end = i
			break
		}
	}
	rest := strings.Join(lines[end:], "")
	if rest != "" {
		section += "\n"
	}
	return strings.Join(lines[:start], "") + section + rest
}
