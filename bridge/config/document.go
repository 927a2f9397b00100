package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// document reads the file's one YAML document and returns its root node
// with every alias and merge key resolved (see resolver), or what is
// wrong: not YAML, empty, more than one document, an alias bomb.
func document(file string, b []byte) (*yaml.Node, Errors) {
	if len(b) > MaxFileSize {
		return nil, Errors{tooLarge(file)}
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := d.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Msg: "the file is empty: want legs and routes"}}
		}
		return nil, Errors{tabError(b, yamlError(file, err.Error()))}
	}
	// A second document (after "---") would be ignored: refuse it, as
	// anything else the gateway would not read. An empty one ("---" at
	// the end) holds nothing to ignore.
	for {
		var more yaml.Node
		err := d.Decode(&more)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, Errors{tabError(b, yamlError(file, err.Error()))}
		}
		if len(more.Content) > 0 && !isNull(more.Content[0]) {
			return nil, Errors{{File: file, Line: more.Line, Msg: `only one YAML document: a second begins here ("---"), and the gateway reads the first alone: put its keys in the first`}}
		}
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil, Errors{{File: file, Msg: "the file is empty: want legs and routes"}}
	}
	r := &resolver{}
	root := r.node(doc.Content[0], 0, 0)
	if r.err != nil {
		return nil, Errors{{File: file, Line: r.err.line, Msg: r.err.msg}}
	}
	return root, nil
}

// Bounds on what aliases make of a file: an alias that names a node
// holding aliases, nested, multiplies (a "billion laughs" file of a few
// hundred bytes expands to 10^9 nodes), so the nodes copied through
// aliases and the aliases followed within one another are bounded, far
// above what a gateway's file needs.
const (
	maxAliasCopies = 100_000
	maxAliasDepth  = 16
)

// resolver makes a tree with no alias and no merge key out of a
// document's: an alias (*name) is replaced by a copy of the node its
// anchor (&name) names; a merge key (<<: *name, or <<: [*a, *b]) by the
// keys of the mappings it names that the mapping does not give itself
// (the mapping's own keys win, and an earlier mapping's over a later
// one's), as YAML's merge key type has it. A copy carries the line of the
// alias it came through, the key's own line where it was used, so that
// what is wrong in it is reported there (and, where the anchored value is
// itself a key's, at its own line too).
type resolver struct {
	copies int // nodes copied through aliases
	err    *lineError
}

// node returns n resolved; line, when not 0, is the line of the alias
// that n came through (every copy takes it), and depth the number of
// aliases followed to reach n.
func (r *resolver) node(n *yaml.Node, line, depth int) *yaml.Node {
	if r.err != nil {
		return null(n.Line)
	}
	if n.Kind == yaml.AliasNode {
		at := n.Line
		if line != 0 {
			at = line
		}
		if depth >= maxAliasDepth {
			r.fail(at, fmt.Sprintf("alias *%s: aliases nested more than %d deep", n.Value, maxAliasDepth))
			return null(at)
		}
		return r.node(n.Alias, at, depth+1)
	}
	if depth > 0 {
		if r.copies++; r.copies > maxAliasCopies {
			r.fail(line, fmt.Sprintf("aliases expand to more than %d values: a file that multiplies itself (an alias bomb)?", maxAliasCopies))
			return null(line)
		}
	}
	c := *n
	c.Content = nil
	if line != 0 {
		c.Line = line
	}
	if n.Kind == yaml.MappingNode {
		c.Content = r.mapping(n, line, depth)
	} else {
		for _, v := range n.Content {
			c.Content = append(c.Content, r.node(v, line, depth))
		}
	}
	return &c
}

// mapping returns a mapping's keys and values, resolved, its merge keys
// replaced by the keys they bring that it does not give itself.
func (r *resolver) mapping(n *yaml.Node, line, depth int) []*yaml.Node {
	var own, merged []*yaml.Node
	given := map[string]bool{}
	mergeLine := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			at := k.Line
			if line != 0 {
				at = line
			}
			if mergeLine != 0 {
				r.fail(at, fmt.Sprintf("<<: given twice (first at line %d): merge several mappings as <<: [*a, *b]", mergeLine))
				continue
			}
			mergeLine = at
			merged = r.merge(v, at, line, depth)
			continue
		}
		k, v = r.node(k, line, depth), r.node(v, line, depth)
		own = append(own, k, v)
		if k.Kind == yaml.ScalarNode {
			given[k.Value] = true
		}
	}
	for i := 0; i+1 < len(merged); i += 2 {
		k := merged[i]
		if k.Kind == yaml.ScalarNode && given[k.Value] {
			continue
		}
		given[k.Value] = true
		own = append(own, k, merged[i+1])
	}
	return own
}

// merge returns the keys and values a merge key's value v brings: a
// mapping's, or those of a list of mappings, an earlier one's key over a
// later one's (the caller drops those the mapping gives itself).
func (r *resolver) merge(v *yaml.Node, at, line, depth int) []*yaml.Node {
	v = r.node(v, line, depth)
	maps := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		maps = v.Content
	}
	var out []*yaml.Node
	seen := map[string]bool{}
	for _, m := range maps {
		if m.Kind != yaml.MappingNode {
			r.fail(at, fmt.Sprintf("<<: want a mapping, or a list of mappings, to merge (as <<: *name), got %s", describe(m)))
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if k.Kind == yaml.ScalarNode && seen[k.Value] {
				continue
			}
			seen[k.Value] = true
			out = append(out, k, m.Content[i+1])
		}
	}
	return out
}

func (r *resolver) fail(line int, msg string) {
	if r.err == nil {
		r.err = &lineError{line, msg}
	}
}

// null is a null node at line, in place of what could not be resolved.
func null(line int) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: line} }

// isNull reports whether n is YAML's null: no value (key:), ~ or null.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what a node holds, in the file's terms, for "want X,
// got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping (keys)"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing"
	case "!!int", "!!float":
		return "a number (" + n.Value + ")"
	case "!!bool":
		return n.Value
	}
	return fmt.Sprintf("%q", n.Value)
}

// tabError says what the YAML decoder's complaint about a tab means, at
// the tab's own line: the decoder reports a tab in the indentation at the
// line before it ("found a tab character that violates indentation"), or
// as a character that "cannot start any token".
func tabError(b []byte, e *Error) *Error {
	if !strings.Contains(e.Msg, "tab character") && !strings.Contains(e.Msg, "cannot start any token") {
		return e
	}
	lines := strings.Split(string(b), "\n")
	for n := max(e.Line, 1); n <= len(lines) && n <= e.Line+1; n++ {
		indent := len(lines[n-1]) - len(strings.TrimLeft(lines[n-1], " \t"))
		if col := strings.IndexByte(lines[n-1][:indent], '\t'); col >= 0 {
			return &Error{File: e.File, Line: n, Msg: fmt.Sprintf("a tab in the indentation (column %d): YAML indents with spaces alone", col+1)}
		}
	}
	return e
}
