// Command vmrun runs rbridge's integration tests in a qemu guest with the
// kernel's rxe and siw devices: it builds (or takes from the cache) the
// guest's base image, cross-builds the test binaries of every package whose
// tests import integration/guest, boots the guest with TCG, streams its
// console, and ends with one SUMMARY line per package and device pass and
// the direct-path baseline table. It exits 0 only when every test binary and
// every baseline pair passed. `make integration` runs it; see
// integration/README.md.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rbridge/rbridge/integration/internal/harness"
)

func main() {
	var (
		pkg         = flag.String("pkg", "", "package patterns to run, space separated (default: packages whose tests import integration/guest)")
		run         = flag.String("run", "", "run only tests matching this regexp (-test.run)")
		bench       = flag.String("bench", "", "also run benchmarks matching this regexp (-test.bench; none by default)")
		benchTime   = flag.String("benchtime", "1s", "-test.benchtime for the benchmarks")
		count       = flag.Int("count", 1, "-test.count: run each test and benchmark this many times (spread of guest figures under TCG)")
		timeout     = flag.Duration("timeout", 12*time.Minute, "kill the guest after this long")
		testTimeout = flag.Duration("test-timeout", 30*time.Minute, "-test.timeout for each test binary and device pass")
		baseline    = flag.Bool("baseline", true, "run the perftest/rping direct-path baseline")
		tests       = flag.Bool("tests", true, "run the test binaries (false: setup and baseline only)")
		docs        = flag.String("docs", "", "write the baseline into this markdown file (e.g. docs/performance.md)")
		cache       = flag.String("cache", "", "cache directory (default <repo>/.cache/vm)")
		kernel      = flag.String("kernel", "", "guest kernel version (default: the one linux-image-amd64 installed)")
		memory      = flag.String("m", "2G", "guest memory")
		cpus        = flag.Int("smp", 2, "guest CPUs")
		env         envFlag
	)
	flag.Var(&env, "env", "KEY=VALUE for the test binaries' environment (repeatable; a soak's RBRIDGE_SOAK=10m)")
	flag.Parse()
	if err := harness.CheckEnv(env); err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: -env: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := vmrun(ctx, options{
		pkgs: strings.Fields(*pkg), run: *run, bench: *bench, benchTime: *benchTime, count: *count, timeout: *timeout, testTimeout: *testTimeout,
		baseline: *baseline, tests: *tests, docs: *docs, cache: *cache, kernel: *kernel, memory: *memory, cpus: *cpus, env: env,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

type options struct {
	pkgs                 []string
	run                  string
	bench, benchTime     string
	count                int
	timeout, testTimeout time.Duration
	baseline, tests      bool
	docs, cache, kernel  string
	memory               string
	cpus                 int
	env                  []string
}

// envFlag collects repeated -env KEY=VALUE flags.
type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, " ") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

// devices are the device passes init.sh runs each binary in, in order.
var devices = []string{"rxe0", "siw0"}

// baselinePairs is how many perftest/rping pairs init.sh runs: five over
// rxe, five over siw, four through rbridge run and one more through it
// busy-polled.
const baselinePairs = 15

func vmrun(ctx context.Context, o options) (int, error) {
	start := time.Now()
	root, err := repoRoot()
	if err != nil {
		return 1, err
	}
	if o.cache == "" {
		o.cache = filepath.Join(root, ".cache/vm")
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return 1, err
	}
	unlock, err := lock(filepath.Join(o.cache, "vmrun.lock"))
	if err != nil {
		return 1, err
	}
	defer unlock()
	start = time.Now()
	img, err := harness.EnsureImage(harness.ImageOptions{Root: root, Cache: o.cache, Kernel: o.kernel, Log: os.Stdout})
	if err != nil {
		return 1, err
	}
	imageDone := time.Now()

	var pkgs []*harness.TestPackage
	if o.tests {
		if pkgs, err = harness.SelectPackages(root, o.pkgs); err != nil {
			return 1, err
		}
	}
	rundir := filepath.Join(o.cache, "run")
	if err := os.RemoveAll(rundir); err != nil {
		return 1, err
	}
	if err := os.MkdirAll(rundir, 0o755); err != nil {
		return 1, err
	}
	var names []string
	for _, p := range pkgs {
		names = append(names, p.ImportPath)
	}
	fmt.Printf("vmrun: building %d test binaries for the guest: %s\n", len(pkgs), strings.Join(names, " "))
	if err := harness.BuildTests(root, rundir, pkgs, os.Stdout); err != nil {
		return 1, err
	}
	test2json := filepath.Join(rundir, "test2json")
	if err := harness.BuildTest2JSON(root, test2json); err != nil {
		return 1, err
	}
	rbridge := ""
	if len(pkgs) > 0 || o.baseline { // the baseline runs pairs through rbridge run too
		rbridge = filepath.Join(rundir, "rbridge")
		if err := harness.BuildRbridge(root, rbridge, os.Stdout); err != nil {
			return 1, err
		}
	}
	initrd := filepath.Join(rundir, "initrd.img")
	if err := writeInitrd(initrd, img, pkgs, test2json, rbridge, harness.RunConfig{
		Run: o.run, Bench: o.bench, BenchTime: o.benchTime, Count: o.count, TestTimeout: o.testTimeout.String(), Baseline: o.baseline, Env: o.env,
	}); err != nil {
		return 1, err
	}
	built := time.Now()

	logPath := filepath.Join(o.cache, "console.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return 1, err
	}
	defer logFile.Close()
	fmt.Printf("vmrun: booting %s under TCG (timeout %s; raw console in %s)\n", img.Vmlinuz, o.timeout, logPath)
	c := &harness.Console{Out: os.Stdout, Now: time.Now}
	bootErr := harness.Boot(ctx, harness.BootOptions{
		Vmlinuz: img.Vmlinuz, Initrd: initrd, Memory: o.memory, CPUs: o.cpus, Timeout: o.timeout, Log: logFile,
	}, c)
	ran := time.Now()

	failed := report(c, pkgs, o, bootErr)
	if !checkArtifacts(c, filepath.Join(rundir, "artifacts")) {
		failed = true
	}
	fmt.Printf("vmrun: image %s, test build %s, guest %s, total %s\n",
		imageDone.Sub(start).Round(time.Second), built.Sub(imageDone).Round(time.Second),
		ran.Sub(built).Round(time.Second), ran.Sub(start).Round(time.Second))

	if o.docs != "" {
		if err := writeDocs(filepath.Join(root, o.docs), c); err != nil {
			return 1, err
		}
	}
	if bootErr != nil {
		return 1, bootErr
	}
	if failed {
		return 1, nil
	}
	return 0, nil
}

// checkArtifacts keeps the files the guest's tests left for the host under
// dir (<id>.<device>/<name>) and lints each Prometheus scrape (a .prom
// file: integration/guest.Artifact) with `promtool check metrics`, which
// the guest image lacks. It says whether every file arrived whole and
// every scrape is clean; promtool missing is a failure too.
func checkArtifacts(c *harness.Console, dir string) (ok bool) {
	if len(c.Artifacts) == 0 {
		return true
	}
	ok = true
	promtool, lookErr := exec.LookPath("promtool")
	linted := 0
	for _, a := range c.Artifacts {
		if a.Err != nil {
			fmt.Printf("FAIL artifact: %v\n", a.Err)
			ok = false
			continue
		}
		path := filepath.Join(dir, a.ID+"."+a.Device, a.Name)
		err := os.MkdirAll(filepath.Dir(path), 0o755)
		if err == nil {
			err = os.WriteFile(path, a.Data, 0o644)
		}
		if err != nil {
			fmt.Printf("artifact %s of %s on %s not kept: %v\n", a.Name, a.ID, a.Device, err)
		}
		if !strings.HasSuffix(a.Name, ".prom") {
			continue
		}
		if lookErr != nil {
			fmt.Printf("FAIL %s: the guest's live scrape is not linted: %v (Debian's prometheus has promtool; make integration installs it)\n", path, lookErr)
			ok = false
			continue
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(a.Data)
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Printf("FAIL promtool check metrics %s (%s on %s): %v\n%s", path, a.ID, a.Device, err, out)
			ok = false
			continue
		}
		linted++
	}
	fmt.Printf("artifacts: %d files from the guest in %s; %d live scrapes pass promtool check metrics\n", len(c.Artifacts), dir, linted)
	return ok
}

// report prints the SUMMARY lines, the baseline table, the failures and
// the count, and says whether anything failed or did not run.
func report(c *harness.Console, pkgs []*harness.TestPackage, o options, bootErr error) (failed bool) {
	fmt.Println()
	var pass, fail, skip int
	seen := map[string]bool{}
	for _, p := range c.Passes {
		fmt.Println(p.Summary())
		pass, fail, skip = pass+p.Passed, fail+p.Failed, skip+p.Skipped
		seen[p.ID+" "+p.Device] = true
		if !p.OK() {
			failed = true
		}
	}
	for _, p := range pkgs {
		for _, d := range devices {
			if !seen[p.ID+" "+d] {
				fmt.Printf("NOT RUN %s %s: the guest stopped before this pass\n", p.ImportPath, d)
				failed = true
			}
		}
	}
	if len(c.Figures) > 0 {
		fmt.Println()
		fmt.Print(harness.BaselineTable(c.Figures))
		fmt.Println("(guest under TCG, ~100x slower than native: compare only within one run)")
	}
	for _, f := range c.Figures {
		if !f.OK() {
			failed = true
			fmt.Printf("\nbaseline %s over %s failed (exit status %d); its output:\n", f.Tool, f.Kind, f.RC)
			for _, l := range f.Output {
				fmt.Println("  " + l)
			}
		}
	}
	if o.baseline && len(c.Figures) < baselinePairs {
		failed = true
		fmt.Printf("baseline incomplete: %d of %d pairs ran\n", len(c.Figures), baselinePairs)
	}
	if c.Failure != "" {
		failed = true
		fmt.Printf("guest setup failed: %s\n", c.Failure)
	}
	switch {
	case bootErr != nil:
		failed = true
	case !c.StatusSeen:
		failed = true
		fmt.Printf("the guest stopped without its STATUS line (kernel panic, or init died?); %s\n", c.Where())
	case c.Status != 0:
		failed = true
	}
	// The failures come last but one, next to the count: a reader of the
	// run's tail (a CI log cut to its end) sees which tests failed.
	for _, p := range c.Passes {
		for _, f := range p.Failures {
			fmt.Printf("FAIL %s %s %s\n", p.Name(), p.Device, f)
		}
	}
	fmt.Printf("integration: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	return failed
}

func writeInitrd(path string, img *harness.Image, pkgs []*harness.TestPackage, test2json, rbridge string, cfg harness.RunConfig) error {
	// The kernel unpacks concatenated archives in order: the cached base, then
	// this run's overlay (after padding the base to 4 bytes).
	base, err := os.ReadFile(img.Initrd)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(base)
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
	if err := harness.WriteOverlay(&buf, img, pkgs, test2json, rbridge, cfg); err != nil {
		return fmt.Errorf("write the test overlay: %w", err)
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func writeDocs(path string, c *harness.Console) error {
	if len(c.Figures) < baselinePairs {
		return fmt.Errorf("not writing %s: the baseline is incomplete", path)
	}
	for _, f := range c.Figures {
		if !f.OK() {
			return fmt.Errorf("not writing %s: baseline %s over %s failed", path, f.Tool, f.Kind)
		}
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	doc := string(old)
	if doc == "" {
		doc = "# Performance\n"
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			load = strings.Join(f[:3], ", ")
		}
	}
	doc = harness.ReplaceSection(doc, harness.BaselineMarkdown(c.Figures, c.Kernel, load))
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	fmt.Printf("vmrun: wrote the baseline into %s\n", path)
	return nil
}

// lock takes an exclusive lock on path, waiting (and saying so) while
// another vmrun holds it: two TCG guests on a 2-core machine would each run
// at half speed, and they share the cache and the run directory.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Printf("vmrun: another guest run holds %s; waiting for it to end\n", path)
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	return func() { f.Close() }, nil
}

// repoRoot finds the module root from the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s: run from the rbridge repository", dir)
		}
	}
}
