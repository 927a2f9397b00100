package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const repoRoot = "../.."

// documents are the repository's Markdown documents a reader is sent to:
// the README, docs/ and the guest's README.
func documents(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "integration", "README.md")}, docs...)
}

// maxDocLine bounds a document's line: a longer one (a table cell holding
// a chapter) cannot be read in an editor or a diff.
const maxDocLine = 600

// TestDocsLineLength: no line of a document is maxDocLine characters or
// longer.
func TestDocsLineLength(t *testing.T) {
	for _, path := range documents(t) {
		for i, l := range strings.Split(readFile(t, path), "\n") {
			if n := len([]rune(l)); n >= maxDocLine {
				t.Errorf("%s:%d: %d characters, want under %d: %.80s...", path, i+1, n, maxDocLine, l)
			}
		}
	}
}

// mdLink is a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// anchors are the anchors of a document's headings.
func anchors(text string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "#") {
			m[slug(h)] = true
		}
	}
	return m
}

// TestDocsLinks: every relative link in a document names a file that
// exists, and an anchor a heading there.
func TestDocsLinks(t *testing.T) {
	for _, path := range documents(t) {
		text := readFile(t, path)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", path, target, err)
					continue
				}
			}
			if anchor != "" && !anchors(readFile(t, dest))[anchor] {
				t.Errorf("%s: link %q: no heading makes #%s in %s", path, target, anchor, dest)
			}
		}
	}
}

// readmeCommands are the commands of the README's first sh block, without
// their comments.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	text := readFile(t, filepath.Join(repoRoot, "README.md"))
	_, rest, ok := strings.Cut(text, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("the README has no sh block")
	}
	var cmds []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		c, _, _ := strings.Cut(l, "#")
		cmds = append(cmds, strings.Join(strings.Fields(c), " "))
	}
	return cmds
}

// TestReadmeCommands: the README's first screen gives the two commands,
// the demo and the test suite, and CI runs the second as it is written.
func TestReadmeCommands(t *testing.T) {
	cmds := readmeCommands(t)
	if want := []string{"CGO_ENABLED=0 go run ./cmd/rbridge demo", "make test"}; !slices.Equal(cmds, want) {
		t.Fatalf("the README's first sh block runs %q, want %q", cmds, want)
	}
	ci := readFile(t, filepath.Join(repoRoot, ".ci", "run"))
	var last string
	for _, l := range strings.Split(strings.TrimSpace(ci), "\n") {
		last = strings.TrimSpace(l)
	}
	if last != cmds[1] {
		t.Errorf(".ci/run ends with %q, want the README's test command %q", last, cmds[1])
	}
	mk := readFile(t, filepath.Join(repoRoot, "Makefile"))
	if !regexp.MustCompile(`(?m)^test:`).MatchString(mk) {
		t.Error("the Makefile has no test target")
	}
	// The first command's arguments after the package: what TestDemo
	// exercises (with a shorter measurement).
	if args := strings.Fields(strings.TrimPrefix(cmds[0], "CGO_ENABLED=0 go run ./cmd/rbridge")); !slices.Equal(args, []string{"demo"}) {
		t.Errorf("the demo command's arguments are %q, want [demo]", args)
	}
	readme := readFile(t, filepath.Join(repoRoot, "README.md"))
	for _, want := range []string{"`bin/rbridge`", "make test-host", "docs/configuration.md"} {
		if !strings.Contains(readme, want) {
			t.Errorf("the README does not mention %s", want)
		}
	}
}

// TestLayoutNamesEveryPackage: docs/layout.md has a row for every Go
// package and none for a package that is not there.
func TestLayoutNamesEveryPackage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("needs the go command: %v", err)
	}
	list := exec.Command(goTool, "list", "./...")
	list.Dir = repoRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(strings.TrimPrefix(p, "github.com/rbridge/rbridge"), "/"))
	}
	var rows []string
	row := regexp.MustCompile("^\\| `([a-z0-9/_-]+)` \\|")
	sc := bufio.NewScanner(strings.NewReader(readFile(t, filepath.Join(repoRoot, "docs", "layout.md"))))
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil && !strings.HasSuffix(m[1], "/") {
			rows = append(rows, m[1])
		}
	}
	slices.Sort(pkgs)
	slices.Sort(rows)
	for _, p := range pkgs {
		if _, found := slices.BinarySearch(rows, p); !found {
			t.Errorf("package %s has no row in docs/layout.md", p)
		}
	}
	for _, r := range rows {
		if _, found := slices.BinarySearch(pkgs, r); !found {
			t.Errorf("docs/layout.md has a row for %s, which is not a package", r)
		}
	}
}

// TestTourLoopback runs the README's tour of rbridge run on
// testdata/loopback.yaml (its admin server on a port the kernel picks):
// --check passes, status shows the route, reload leaves it unchanged, and
// SIGTERM stops the gateway with exit 0.
func TestTourLoopback(t *testing.T) {
	src := readFile(t, filepath.Join(repoRoot, "testdata", "loopback.yaml"))
	const admin = `"127.0.0.1:9479"`
	if !strings.Contains(src, admin) {
		t.Fatalf("testdata/loopback.yaml does not listen on %s, which the tour's commands use", admin)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "loopback.yaml")
	// The control socket where this test alone has it (the tour's is the default).
	control := filepath.Join(dir, "control.sock")
	if err := os.WriteFile(cfg, []byte(strings.Replace(src, admin, `"127.0.0.1:0"`+"\n  control: "+control, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, nil, "run", "--config", cfg, "--check"); err != nil || !strings.Contains(out, "2 legs, 1 routes: ok") {
		t.Fatalf("run --check: %v\n%s", err, out)
	}
	p := startRun(t, nil, "run", "--config", cfg)
	addr := adminAddress(t, p)
	out, _, err := run(t, nil, "status", "--admin", addr)
	if err != nil || !regexp.MustCompile(`(?m)^echo +a 127\.0\.20\.1:7471 +b 127\.0\.20\.3:7471 .*accepting`).MatchString(out) {
		t.Errorf("rbridge status: %v\n%s", err, out)
	}
	out, _, err = run(t, nil, "reload", "--control", control)
	if err != nil || !strings.Contains(out, "unchanged echo") {
		t.Errorf("rbridge reload: %v\n%s", err, out)
	}
	p.stop(t)
}

// TestRunLogFormatJSON: --log-format json makes every line rbridge run
// logs one JSON object.
func TestRunLogFormatJSON(t *testing.T) {
	src := readFile(t, filepath.Join(repoRoot, "testdata", "loopback.yaml"))
	src = strings.NewReplacer(`"127.0.0.1:9479"`, `"127.0.0.1:0"`+"\n  control: \"\"", "127.0.20.", "127.0.22.").Replace(src)
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startRun(t, nil, "run", "--config", cfg, "--log-format", "json")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.logs.String(), `"msg":"gateway running"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rbridge run did not log gateway running as JSON")
		}
	}
	p.stop(t)
	for _, l := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", l, err)
		}
	}
	if _, _, err := run(t, nil, "run", "--config", cfg, "--log-format", "yaml"); !strings.Contains(errString(err), `--log-format "yaml": want text or json`) {
		t.Errorf("--log-format yaml: %v", err)
	}
}
