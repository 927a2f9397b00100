package main

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestHelpConfig: rbridge help config (and config --help) prints every
// key the parser accepts (the keys TestConfigKeysDocumented checks
// docs/configuration.md against) with its type, default and what it
// applies to, from that page as the binary embeds it; run --help points
// to it.
func TestHelpConfig(t *testing.T) {
	var keys, mappings []string
	configKeys(reflect.TypeFor[config.Config](), "", &keys, &mappings)
	for _, args := range [][]string{{"help", "config"}, {"config", "--help"}} {
		out, _, err := run(t, nil, args...)
		if err != nil {
			t.Fatalf("rbridge %s: %v", strings.Join(args, " "), err)
		}
		for _, k := range keys {
			block := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(k) + `\n      type:       \S.*\n      default:    \S.*\n      applies to: \S.*\n      example:    \S.*$`)
			if !block.MatchString(out) {
				t.Errorf("rbridge %s: no key %s with its type, default, what it applies to and an example", strings.Join(args, " "), k)
			}
		}
		if strings.Contains(out, "`") || strings.Contains(out, "|---") {
			t.Errorf("rbridge %s: Markdown left in what a terminal shows", strings.Join(args, " "))
		}
	}
	if out, _, err := run(t, nil, "run", "--help"); err != nil || !strings.Contains(out, "rbridge help config") {
		t.Errorf("rbridge run --help does not point to rbridge help config (%v)", err)
	}
}

// TestConfigRowsParse: every key's row of docs/configuration.md has its
// five cells, so none is left out of rbridge help config.
func TestConfigRowsParse(t *testing.T) {
	for _, tc := range []struct {
		line string
		want configRow
		ok   bool
	}{
		{"| `legs.ip` | IP address | required | every leg | `ip: 198.18.3.1` |", configRow{"legs.ip", "IP address", "required", "every leg", "ip: 198.18.3.1"}, true},
		{"| `legs.over` | a verbs leg's name | none | quic ([two-gateways.md](two-gateways.md)) | `over: ib` |", configRow{"legs.over", "a verbs leg's name", "none", "quic (two-gateways.md)", "over: ib"}, true},
		{"| key | type | default | applies to | example |", configRow{}, false},
		{"| `legs.ip` | IP address | required |", configRow{}, false},
	} {
		got, ok := parseConfigRow(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseConfigRow(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
