package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// GuestImport is the package whose import in a _test.go file puts a package's tests in the guest.
const GuestImport = "github.com/rbridge/rbridge/integration/guest"

// TestPackage is a package whose test binary runs in the guest.
type TestPackage struct {
	ImportPath string
	Dir        string
	ID         string // directory name in the overlay, unique
	Binary     string // host path of the `go test -c` binary
}

// SelectPackages lists the packages to run in the guest: those matched by
// patterns when some are given, else every package of the module whose tests
// import the guest package. Packages without test files are left out.
func SelectPackages(root string, patterns []string) ([]*TestPackage, error) {
	explicit := len(patterns) > 0
	if !explicit {
		patterns = []string{"./..."}
	}
	args := append([]string{"list", "-f",
		"{{.ImportPath}}|{{.Dir}}|{{len .TestGoFiles}}|{{len .XTestGoFiles}}|{{join .TestImports \",\"}},{{join .XTestImports \",\"}}"},
		patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %v: %s", strings.Join(patterns, " "), err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []*TestPackage
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 5)
		if len(f) != 5 {
			continue
		}
		if f[2] == "0" && f[3] == "0" {
			continue
		}
		if !explicit && !containsImport(f[4], GuestImport) {
			continue
		}
		p := &TestPackage{ImportPath: f[0], Dir: f[1], ID: PackageID(f[0])}
		for ids[p.ID] {
			p.ID += "_"
		}
		ids[p.ID] = true
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

func containsImport(list, path string) bool {
	for _, p := range strings.Split(list, ",") {
		if p == path {
			return true
		}
	}
	return false
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// PackageID turns an import path into a directory name for the overlay:
// the path inside the module with slashes as underscores ("roce_engine").
func PackageID(importPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, "github.com/rbridge/rbridge"), "/")
	if rel == "" {
		rel = "rbridge"
	}
	return unsafeID.ReplaceAllString(rel, "_")
}

// BuildTests cross-builds each package's test binary with `go test -c` into dir.
func BuildTests(root, dir string, pkgs []*TestPackage, log io.Writer) error {
	for _, p := range pkgs {
		p.Binary = filepath.Join(dir, p.ID+".test")
		os.Remove(p.Binary)
		cmd := exec.Command("go", "test", "-c", "-o", p.Binary, p.ImportPath)
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go test -c %s: %w", p.ImportPath, err)
		}
		if _, err := os.Stat(p.Binary); err != nil {
			return fmt.Errorf("go test -c %s wrote no binary: %w", p.ImportPath, err)
		}
	}
	return nil
}

// BuildTest2JSON builds cmd/test2json for the guest, which runs each test
// binary under it so the console carries JSON events and exit statuses.
func BuildTest2JSON(root, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "cmd/test2json")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build cmd/test2json: %v: %s", err, b)
	}
	return nil
}

// BuildRbridge builds the rbridge command for the guest (cgo included: the
// guest has the host's libraries), which tests run as users do:
// /tests/bin/rbridge, named by RBRIDGE_BINARY (guest.Rbridge).
func BuildRbridge(root, out string, log io.Writer) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/rbridge")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/rbridge: %w", err)
	}
	return nil
}

// RunConfig is what the guest's init reads from /tests/config.
type RunConfig struct {
	Run         string // -test.run regexp, empty for all
	Bench       string // -test.bench regexp, empty for no benchmarks
	BenchTime   string // -test.benchtime, empty for the default (1s)
	Count       int    // -test.count, 0 for 1: benchmarks run this many times, interleaved by binary
	TestTimeout string // -test.timeout per binary and pass
	Baseline    bool   // run the perftest/rping baseline
	// Env are KEY=VALUE pairs the test binaries get in their environment
	// (a soak's duration); a key is letters, digits and underscores.
	Env []string
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c RunConfig) script() string {
	baseline := "0"
	if c.Baseline {
		baseline = "1"
	}
	count := max(c.Count, 1)
	benchTime := c.BenchTime
	if benchTime == "" {
		benchTime = "1s"
	}
	script := fmt.Sprintf("RUN=%s\nBENCH=%s\nBENCHTIME=%s\nCOUNT=%d\nTEST_TIMEOUT=%s\nBASELINE=%s\n",
		shellQuote(c.Run), shellQuote(c.Bench), shellQuote(benchTime), count, shellQuote(c.TestTimeout), baseline)
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		script += "export " + k + "=" + shellQuote(v) + "\n"
	}
	return script
}

// CheckEnv checks KEY=VALUE pairs for RunConfig.Env: each has a key of
// letters, digits and underscores, not starting with a digit.
func CheckEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		valid := ok && k != "" && (k[0] < '0' || k[0] > '9')
		for _, r := range k {
			if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				valid = false
			}
		}
		if !valid {
			return fmt.Errorf("environment %q: want KEY=VALUE, the key of letters, digits and underscores", kv)
		}
	}
	return nil
}

// WriteOverlay writes the per-run cpio archive that the kernel unpacks after
// the base image: /tests/config, /tests/manifest, /tests/test2json, each
// package's binary as /tests/<id>/test with its testdata under
// /tests/<id>/src (the binary's working directory), and the shared libraries
// the binaries load that the base image lacks; rbridge, when not empty,
// goes to /tests/bin/rbridge.
func WriteOverlay(w io.Writer, img *Image, pkgs []*TestPackage, test2json, rbridge string, cfg RunConfig) error {
	cw := NewCPIOWriter(w)
	var manifest strings.Builder
	for _, p := range pkgs {
		fmt.Fprintf(&manifest, "%s %s\n", p.ID, p.ImportPath)
	}
	if err := cw.File("tests/config", 0o644, int64(len(cfg.script())), strings.NewReader(cfg.script())); err != nil {
		return err
	}
	if err := cw.File("tests/manifest", 0o644, int64(manifest.Len()), strings.NewReader(manifest.String())); err != nil {
		return err
	}
	if err := addHostFile(cw, "tests/test2json", test2json); err != nil {
		return err
	}
	libs := map[string]bool{}
	if rbridge != "" {
		if err := cw.Dir("tests/bin"); err != nil {
			return err
		}
		if err := addHostFile(cw, "tests/bin/rbridge", rbridge); err != nil {
			return err
		}
		needed, err := sharedLibs(rbridge)
		if err != nil {
			return err
		}
		for _, l := range needed {
			libs[l] = true
		}
	}
	for _, p := range pkgs {
		if err := addHostFile(cw, "tests/"+p.ID+"/test", p.Binary); err != nil {
			return err
		}
		if err := cw.Dir("tests/" + p.ID + "/src"); err != nil {
			return err
		}
		if err := addTree(cw, "tests/"+p.ID+"/src/testdata", filepath.Join(p.Dir, "testdata")); err != nil {
			return err
		}
		needed, err := sharedLibs(p.Binary)
		if err != nil {
			return err
		}
		for _, l := range needed {
			libs[l] = true
		}
	}
	var extra []string
	for l := range libs {
		if !img.Files[l] {
			extra = append(extra, l)
		}
	}
	sort.Strings(extra)
	for _, l := range extra {
		if err := addHostFile(cw, l, l); err != nil {
			return err
		}
	}
	return cw.Close()
}

// sharedLibs lists the libraries that ldd resolves for bin, with their paths
// under /usr: Debian is merged-/usr, and the base image's file list has them so.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		// "not a dynamic executable": a static binary needs nothing.
		return nil, nil
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("%s needs a library the host lacks: %s", bin, strings.TrimSpace(line))
		}
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, usrPath(f))
			}
		}
	}
	return libs, nil
}

// usrPath maps /lib/... and /lib64/... to the same file under /usr.
func usrPath(p string) string {
	if strings.HasPrefix(p, "/lib/") || strings.HasPrefix(p, "/lib64/") {
		return "/usr" + p
	}
	return p
}

func addHostFile(cw *CPIOWriter, name, host string) error {
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return cw.File(name, uint32(st.Mode().Perm()), st.Size(), f)
}

// addTree copies the host directory tree at host (when it exists) under name.
func addTree(cw *CPIOWriter, name, host string) error {
	if _, err := os.Stat(host); err != nil {
		return nil
	}
	return filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(host, p)
		target := filepath.ToSlash(filepath.Join(name, rel))
		switch {
		case d.IsDir():
			return cw.Dir(target)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return cw.Symlink(target, link)
		case d.Type().IsRegular():
			return addHostFile(cw, target, p)
		}
		return nil
	})
}
