package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadUsageIsTwo: every command refuses a flag it does not have, an
// argument it does not take and a flag value out of its range with exit
// status 2, as does an unknown command.
func TestBadUsageIsTwo(t *testing.T) {
	cases := [][]string{{"no-such-command"}}
	for _, e := range exitStatuses {
		cases = append(cases, []string{e.command, "--no-such-flag"})
		if e.command != "decode" {
			cases = append(cases, []string{e.command, "extra-argument"})
		}
	}
	cases = append(cases,
		[]string{"decode"},
		[]string{"decode", "a", "b"},
		[]string{"run"},
		[]string{"run", "--config", "x.yaml", "--log-level", "loud"},
		[]string{"run", "--config", "x.yaml", "--drain", "-1s"},
		[]string{"run", "--config", "/nonexistent.yaml"},
		[]string{"demo", "--size", "0"},
		[]string{"demo", "--duration", "1ms"},
		[]string{"bench", "--window", "0"},
		[]string{"doctor", "--interval", "-1s"},
		[]string{"status", "--admin", "nonsense"},
		[]string{"reload", "--control", "nonsense"},
	)
	for _, args := range cases {
		_, _, err := run(t, nil, args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || ee.err == nil {
			t.Errorf("rbridge %s: %v, want exit status 2 with why", strings.Join(args, " "), err)
		}
	}
}

// TestExitStatusHelp: every command's --help has its exit statuses, and
// docs/operations.md has the table they come from.
func TestExitStatusHelp(t *testing.T) {
	root := newRootCommand()
	for _, c := range root.Commands() {
		switch {
		case c.Name() == "help", c.Name() == "completion", c.IsAdditionalHelpTopicCommand():
			continue
		}
		help := exitStatusHelp(c.Name())
		if !strings.Contains(c.Long, help) || !strings.Contains(help, "  0  ") {
			t.Errorf("rbridge %s --help lacks its exit statuses:\n%s", c.Name(), help)
		}
	}
	if docs := readFile(t, filepath.Join(repoRoot, "docs", "operations.md")); !strings.Contains(docs, exitStatusTable()) {
		t.Errorf("docs/operations.md lacks the exit status table; want:\n%s", exitStatusTable())
	}
	if !strings.Contains(root.Long, "demo") {
		t.Error("rbridge --help does not name demo")
	}
}
