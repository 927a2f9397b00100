package harness

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePerftest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines string
		want  map[string]string
	}{
		{
			name: "bandwidth",
			lines: ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      1000             30.47              30.08  		   0.000481
---------------------------------------------------------------------------------------`,
			want: map[string]string{"#bytes": "65536", "#iterations": "1000", "BW peak[MB/sec]": "30.47",
				"BW average[MB/sec]": "30.08", "MsgRate[Mpps]": "0.000481"},
		},
		{
			name: "latency",
			lines: ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       1000          22.52          318.07       23.64    	       28.57       	18.74  		129.52  		318.07 `,
			want: map[string]string{"#bytes": "2", "#iterations": "1000", "t_min[usec]": "22.52", "t_max[usec]": "318.07",
				"t_typical[usec]": "23.64", "t_avg[usec]": "28.57", "t_stdev[usec]": "18.74",
				"99% percentile[usec]": "129.52", "99.9% percentile[usec]": "318.07"},
		},
		{
			name: "warning before the row",
			lines: ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
Correlation coefficient r^2: 0.497217 < 0.9
 2       1000          35.44          2037.96      50.17    	       69.02       	62.18  		357.20  		2037.96
---------------------------------------------------------------------------------------`,
			want: map[string]string{"#bytes": "2", "#iterations": "1000", "t_min[usec]": "35.44", "t_max[usec]": "2037.96",
				"t_typical[usec]": "50.17", "t_avg[usec]": "69.02", "t_stdev[usec]": "62.18",
				"99% percentile[usec]": "357.20", "99.9% percentile[usec]": "2037.96"},
		},
		{name: "table closed without a row", lines: " #bytes     #iterations    BW peak[MB/sec]\n-----\n 65536 1000 1.0\n"},
		{name: "no results", lines: " #bytes     #iterations    BW peak[MB/sec]\nConnection refused\n"},
		{name: "short row", lines: " #bytes     #iterations    BW peak[MB/sec]\n 65536 1000\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParsePerftest(strings.Split(tc.lines, "\n"))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParsePerftest (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFigureFailedWithoutResults(t *testing.T) {
	f := &Figure{Tool: "ib_write_bw", Kind: "siw", RC: 0}
	if f.OK() {
		t.Error("a perftest pair that printed no results table is OK")
	}
	f = &Figure{Tool: "ib_send_lat", Kind: "rxe", Columns: map[string]string{"#bytes": "2", "t_typical[usec]": "inf", "t_stdev[usec]": "-nan"}}
	if f.OK() {
		t.Error("a perftest pair with inf figures is OK")
	}
	f = &Figure{Tool: "ib_send_lat", Kind: "rxe", Columns: map[string]string{"#bytes": "2", "t_typical[usec]": "8015.31", "t_max[usec]": "inf", "t_stdev[usec]": "-nan"}}
	if f.OK() {
		t.Error("a perftest pair with an inf maximum is OK")
	}
	// perftest's stdev overflows its int from a round trip 46.3 ms off the
	// average: the rest of its figures are good.
	f = &Figure{Tool: "ib_send_lat", Kind: "rbridge-afxdp-busy", Columns: map[string]string{"#bytes": "2", "t_min[usec]": "514.35", "t_max[usec]": "63337.82",
		"t_typical[usec]": "8015.31", "t_avg[usec]": "8807.57", "t_stdev[usec]": "-nan", "99% percentile[usec]": "57172.82"}}
	if !f.OK() {
		t.Error("a latency pair whose figures are finite but for its stdev (-nan) is not OK")
	}
	f = &Figure{Tool: "ib_write_bw", Kind: "rxe", Columns: map[string]string{"#bytes": "65536", "BW average[MB/sec]": "0.00"}}
	if f.OK() {
		t.Error("a perftest pair with 0 bandwidth is OK")
	}
	f = &Figure{Tool: "rping", Kind: "siw", RC: 1}
	if got, want := f.Result(), "FAILED (exit status 1)"; got != want {
		t.Errorf("Result() = %q, want %q", got, want)
	}
}

func TestReplaceSection(t *testing.T) {
	section := BaselineHeading + "\n\nnew figures\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", "", section},
		{"appended", "# Performance\n\n## Pool\n\npool text\n",
			"# Performance\n\n## Pool\n\npool text\n\n" + section},
		{"replaced, others kept", "# Performance\n\n" + BaselineHeading + "\n\nold figures\nmore\n\n## Pool\n\npool text\n",
			"# Performance\n\n" + section + "\n## Pool\n\npool text\n"},
		{"replaced at the end", "# Performance\n\n" + BaselineHeading + "\n\nold figures\n",
			"# Performance\n\n" + section},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ReplaceSection(tc.doc, section)); diff != "" {
				t.Errorf("ReplaceSection (-want +got):\n%s", diff)
			}
		})
	}
}
