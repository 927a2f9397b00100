package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the findings as a table (severity, check, subject, what
// was seen), each one's fix on the line below it, then the count of each
// severity.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tCHECK\tSUBJECT\tFINDING")
	var n [3]int
	for _, f := range r.Findings {
		subj := f.Subject
		if f.Leg != "" && subj != "leg "+f.Leg { // a leg's own finding names it once
			subj += " (leg " + f.Leg + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Check, subj, oneLine(f.Message))
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\t\t-> %s\n", oneLine(f.Fix))
		}
		if f.Severity >= OK && f.Severity <= Error {
			n[f.Severity]++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d ok, %d warnings, %d errors\n", n[OK], n[Warn], n[Error])
	return err
}

// WriteJSON writes the report as one JSON object: {"findings": [...],
// "worst": "ok"|"warn"|"error"}.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	findings := r.Findings
	if findings == nil {
		findings = []Finding{}
	}
	return e.Encode(struct {
		Findings []Finding `json:"findings"`
		Worst    Severity  `json:"worst"`
	}{findings, r.Worst()})
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
