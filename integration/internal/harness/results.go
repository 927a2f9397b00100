package harness

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Event is one line of `go tool test2json` output.
type Event struct {
	Time    time.Time `json:",omitempty"`
	Action  string
	Package string  `json:",omitempty"`
	Test    string  `json:",omitempty"`
	Elapsed float64 `json:",omitempty"`
	Output  string  `json:",omitempty"`
}

// Pass is the result of one test binary in one device pass.
type Pass struct {
	ID      string // overlay directory of the binary, e.g. "ibv"
	Package string // import path, from the events
	Device  string // device of the pass, e.g. "rxe0"

	Passed, Failed, Skipped int
	Failures                []string // failed tests, and why the binary failed outside a test

	running  map[string]time.Time // tests started and not ended, with their start
	pkgEnded string               // "pass" or "fail" once the package-level event came
	ExitCode int                  // exit status printed by the guest (-1: never ended)
	Ended    bool
}

func newPass(id, device string) *Pass {
	return &Pass{ID: id, Device: device, ExitCode: -1, running: map[string]time.Time{}}
}

// event counts one test2json event.
func (p *Pass) event(e Event) {
	if e.Package != "" {
		p.Package = e.Package
	}
	if e.Test == "" {
		if e.Action == "pass" || e.Action == "fail" {
			p.pkgEnded = e.Action
		}
		return
	}
	switch e.Action {
	case "run":
		p.running[e.Test] = e.Time
	case "pass", "bench":
		delete(p.running, e.Test)
		p.Passed++
	case "skip":
		delete(p.running, e.Test)
		p.Skipped++
	case "fail":
		delete(p.running, e.Test)
		p.Failed++
		p.Failures = append(p.Failures, e.Test)
	}
}

// finish records the binary's exit status. Tests that started and never
// ended count as failures, and so does a binary that failed outside any test
// (a crash in TestMain, a missing library, a timeout panic).
func (p *Pass) finish(rc int) {
	p.Ended = true
	p.ExitCode = rc
	for _, name := range p.Running() {
		// test2json ends a benchmark that logged nothing with no event of
		// its own: it ran to the end if the binary passed.
		if strings.HasPrefix(name, "Benchmark") && rc == 0 && p.pkgEnded == "pass" {
			p.Passed++
			continue
		}
		p.Failed++
		p.Failures = append(p.Failures, name+" (never ended)")
	}
	p.running = map[string]time.Time{}
	if p.Failed == 0 && (rc != 0 || p.pkgEnded != "pass") {
		p.Failed++
		if rc != 0 {
			p.Failures = append(p.Failures, fmt.Sprintf("test binary exited with status %d outside any test", rc))
		} else {
			p.Failures = append(p.Failures, "test binary ended without reporting PASS")
		}
	}
}

// Running lists the tests that started and have not ended, sorted.
func (p *Pass) Running() []string {
	var names []string
	for name := range p.running {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// OK reports whether the binary ran to the end with no failure.
func (p *Pass) OK() bool { return p.Ended && p.ExitCode == 0 && p.Failed == 0 }

// Name is the package's import path, or its overlay ID before any event named it.
func (p *Pass) Name() string {
	if p.Package == "" {
		return p.ID
	}
	return p.Package
}

// Summary is the line `make integration` prints for the pass.
func (p *Pass) Summary() string {
	return fmt.Sprintf("SUMMARY %s %s pass=%d fail=%d skip=%d", p.Name(), p.Device, p.Passed, p.Failed, p.Skipped)
}

// parseEvent decodes a test2json line. Kernel messages can land in the middle
// of a console line, so it also looks for an event that starts after them.
func parseEvent(line string) (Event, bool) {
	var e Event
	i := strings.Index(line, `{"Time"`)
	if i < 0 {
		i = strings.Index(line, `{"Action"`)
	}
	if i < 0 {
		return e, false
	}
	if err := json.Unmarshal([]byte(line[i:]), &e); err != nil || e.Action == "" {
		return e, false
	}
	return e, true
}
