package main

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
)

// configKeys walks a config type's yaml tags: every key path ("legs.ip")
// the file may hold, and the paths of those that hold a mapping of keys
// (a struct, or a list of them), whose keys the parser checks.
func configKeys(t reflect.Type, prefix string, keys, mappings *[]string) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		ft := f.Type
		if f.Anonymous { // inline: Fallback holds Endpoint's keys
			configKeys(ft, prefix, keys, mappings)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		*keys = append(*keys, path)
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !isScalarType(ft) {
			*mappings = append(*mappings, path)
			configKeys(ft, path+".", keys, mappings)
		}
	}
}

// isScalarType says whether a struct type is a single value in the file
// (an address, a prefix), not a mapping of keys.
func isScalarType(t reflect.Type) bool {
	switch t {
	case reflect.TypeFor[netip.Addr](), reflect.TypeFor[netip.AddrPort](), reflect.TypeFor[netip.Prefix](), reflect.TypeFor[time.Duration]():
		return true
	}
	return false
}

// unknownKey is how the parser refuses a key it does not take, with the
// keys it takes there.
var unknownKey = regexp.MustCompile(`unknown key "zz_probe" \(known: ([^)]*)\)`)

// parserKeys asks the parser which keys it takes in the mapping at path
// (a dotted key path; "" the top level): it gives it an unknown key there
// and reads the keys its refusal lists.
func parserKeys(t *testing.T, path string, lists map[string]bool) []string {
	t.Helper()
	doc := "{zz_probe: 1}"
	if path != "" {
		parts := strings.Split(path, ".")
		for i := len(parts) - 1; i >= 0; i-- {
			if lists[strings.Join(parts[:i+1], ".")] {
				doc = "[" + doc + "]"
			}
			doc = "{" + parts[i] + ": " + doc + "}"
		}
	}
	_, err := config.Parse("probe.yaml", []byte(doc))
	m := unknownKey.FindStringSubmatch(errString(err))
	if m == nil {
		t.Fatalf("the parser did not refuse an unknown key at %q (%s): %v", path, doc, err)
	}
	return strings.Split(m[1], ", ")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestConfigKeysDocumented: docs/configuration.md documents every key the
// config parser accepts, and nothing it does not. The keys come from the
// config types' yaml tags, and each mapping's from the parser itself (the
// keys it names when it refuses an unknown one), so that neither a new
// field nor a new key in the parser's tables goes undocumented.
func TestConfigKeysDocumented(t *testing.T) {
	var keys, mappings []string
	configKeys(reflect.TypeFor[config.Config](), "", &keys, &mappings)
	lists := map[string]bool{}
	for f := range reflect.TypeFor[config.Config]().Fields() {
		if f.Type.Kind() == reflect.Slice {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			lists[name] = true
		}
	}
	// The parser's own tables agree with the tags, mapping by mapping.
	for _, m := range append([]string{""}, mappings...) {
		var want []string
		prefix := m + "."
		if m == "" {
			prefix = ""
		}
		for _, k := range keys {
			if rest, ok := strings.CutPrefix(k, prefix); ok && !strings.Contains(rest, ".") {
				want = append(want, rest)
			}
		}
		got := parserKeys(t, m, lists)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("at %q the parser takes %v, the yaml tags say %v", m, got, want)
		}
	}

	// Every documented key is a table row whose first cell is its path.
	row := regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\|")
	var documented []string
	for _, m := range row.FindAllStringSubmatch(readFile(t, filepath.Join(repoRoot, "docs", "configuration.md")), -1) {
		documented = append(documented, m[1])
	}
	for _, k := range keys {
		if !slices.Contains(documented, k) {
			t.Errorf("key %s is accepted but not documented in docs/configuration.md", k)
		}
	}
	for _, d := range documented {
		if !slices.Contains(keys, d) {
			t.Errorf("docs/configuration.md documents %s, which the parser does not accept", d)
		}
	}
	if len(keys) < 50 {
		t.Errorf("only %d keys found in the config types: %v", len(keys), keys)
	}
}
