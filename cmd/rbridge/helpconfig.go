package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/docs"
)

// newConfigHelpTopic is `rbridge help config` (and `rbridge config
// --help`): the configuration reference, docs/configuration.md as
// embedded in the binary, for a terminal.
func newConfigHelpTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "The config file's keys: type, default, what each applies to (rbridge help config)",
		Long:  configReference(docs.Configuration),
	}
}

// configRow is a key's row of a reference table: its path, type, default,
// what it applies to, and an example.
type configRow struct{ key, typ, def, appliesTo, example string }

// parseConfigRow reads a reference table's row ("| `legs.ip` | ... |"):
// ok is false for a line that is not a key's row.
func parseConfigRow(line string) (configRow, bool) {
	if !strings.HasPrefix(line, "| `") {
		return configRow{}, false
	}
	cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), " |"), " | ")
	if len(cells) != 5 {
		return configRow{}, false
	}
	for i := range cells {
		cells[i] = plainText(cells[i])
	}
	return configRow{cells[0], cells[1], cells[2], cells[3], cells[4]}, true
}

var mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// plainText is a line of Markdown as a terminal shows it: without code
// spans' backticks, a link as its text.
func plainText(s string) string {
	return strings.ReplaceAll(mdLinkText.ReplaceAllString(s, "$1"), "`", "")
}

// configReference renders the configuration reference's Markdown for a
// terminal: headings underlined, each table row a key with its type,
// default, what it applies to and example on lines of their own (a row is
// far wider than a terminal), code blocks indented, the prose as it is.
func configReference(md string) string {
	var b strings.Builder
	inCode := false
	for line := range strings.SplitSeq(strings.TrimRight(md, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inCode = !inCode
			continue
		case inCode:
			fmt.Fprintf(&b, "    %s\n", line)
			continue
		case strings.HasPrefix(line, "#"):
			h := strings.TrimSpace(strings.TrimLeft(line, "#"))
			fmt.Fprintf(&b, "%s\n%s\n", h, strings.Repeat("=", len(h)))
			continue
		case strings.HasPrefix(line, "| key |") || strings.HasPrefix(line, "|---"):
			continue
		}
		if r, ok := parseConfigRow(line); ok {
			fmt.Fprintf(&b, "  %s\n      type:       %s\n      default:    %s\n      applies to: %s\n      example:    %s\n",
				r.key, r.typ, r.def, r.appliesTo, r.example)
			continue
		}
		fmt.Fprintln(&b, plainText(line))
	}
	return strings.TrimRight(b.String(), "\n")
}
