package igmp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/internal/igmp"
)

var (
	self  = netip.MustParseAddr("10.0.0.5")
	host  = netip.MustParseAddr("10.0.0.7")
	lower = netip.MustParseAddr("10.0.0.1") // a router that wins the election
)

// step is something that happens to a table at a time (seconds after
// start): a message heard (from host unless src says), or only the clock;
// then what Advance returns.
type step struct {
	at      float64
	src     netip.Addr
	msg     []byte // nil: no message, only Advance
	joined  []igmp.Event
	queries []igmp.Query
	gone    []igmp.Event
}

func report(recs ...igmp.Record) []byte { return igmp.AppendReportV3(nil, recs) }

var (
	general = igmp.Query{Group: netip.IPv4Unspecified(), MaxResp: 10 * time.Second}
	grpQ    = igmp.Query{Group: grp, MaxResp: time.Second}
)

// TestTable: the table's membership and querier state through scenarios,
// on a clock the test moves.
func TestTable(t *testing.T) {
	startup := []step{{at: 0, queries: []igmp.Query{general}}}
	join := []step{{at: 1, msg: report(igmp.Record{Type: igmp.ChangeToExcludeMode, Group: grp}), joined: []igmp.Event{{Kind: igmp.Joined, Group: grp}}}}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"startup queries, then every interval", append(startup,
			step{at: 31}, step{at: 31.25, queries: []igmp.Query{general}}, step{at: 156}, step{at: 156.25, queries: []igmp.Query{general}})},
		{"v3 join, leave: queried twice, gone 2 s later", concat(startup, join, []step{
			{at: 5, msg: report(igmp.Record{Type: igmp.ChangeToIncludeMode, Group: grp}), queries: []igmp.Query{grpQ}},
			{at: 6, queries: []igmp.Query{grpQ}},
			{at: 6.9},
			{at: 7, gone: []igmp.Event{{Kind: igmp.Left, Group: grp}}},
		})},
		{"leave, another member answers: stays", concat(startup, join, []step{
			{at: 5, msg: igmp.AppendV2(nil, igmp.TypeLeave, grp, 0), queries: []igmp.Query{grpQ}},
			{at: 5.5, src: lower.Next(), msg: report(igmp.Record{Type: igmp.ModeIsExclude, Group: grp})},
			{at: 10},
			{at: 31.25, queries: []igmp.Query{general}}, // the second startup query
			{at: 156.25, queries: []igmp.Query{general}},
			{at: 265.4},
			{at: 265.5, gone: []igmp.Event{{Kind: igmp.Expired, Group: grp}}},
		})},
		{"v2 report, no more reports: expires after 260 s", concat(startup, []step{
			{at: 2, msg: igmp.AppendV2(nil, igmp.TypeReportV2, grp, 0), joined: []igmp.Event{{Kind: igmp.Joined, Group: grp}}},
			{at: 3, msg: igmp.AppendV2(nil, igmp.TypeReportV1, grp2, 0), joined: []igmp.Event{{Kind: igmp.Joined, Group: grp2}}},
			{at: 31.25, queries: []igmp.Query{general}},
			{at: 156.25, queries: []igmp.Query{general}},
			{at: 261.9},
			{at: 262, gone: []igmp.Event{{Kind: igmp.Expired, Group: grp}}},
			{at: 263, gone: []igmp.Event{{Kind: igmp.Expired, Group: grp2}}},
		})},
		{"link-local and unicast groups are not kept; our own messages ignored", concat(startup, []step{
			{at: 1, msg: igmp.AppendV2(nil, igmp.TypeReportV2, netip.MustParseAddr("224.0.0.251"), 0)},
			{at: 1, msg: igmp.AppendV2(nil, igmp.TypeReportV2, netip.MustParseAddr("10.1.1.1"), 0)},
			{at: 1, src: self, msg: igmp.AppendV2(nil, igmp.TypeReportV2, grp, 0)},
			{at: 1, src: self, msg: igmp.AppendQuery(nil, igmp.QueryFields{MaxResp: time.Second})},
		})},
		{"sources: INCLUDE with sources joins, BLOCK queries", concat(startup, []step{
			{at: 1, msg: report(igmp.Record{Type: igmp.AllowNewSources, Group: grp2}, igmp.Record{Type: igmp.ModeIsInclude, Group: grp, Sources: 1}),
				joined: []igmp.Event{{Kind: igmp.Joined, Group: grp}}},
			{at: 2, msg: report(igmp.Record{Type: igmp.BlockOldSources, Group: grp, Sources: 1}), queries: []igmp.Query{grpQ}},
			{at: 3, queries: []igmp.Query{grpQ}},
			{at: 4, gone: []igmp.Event{{Kind: igmp.Left, Group: grp}}},
		})},
		{"a lower querier: we stop querying, follow its group query, take over when it is silent", concat(startup, join, []step{
			{at: 2, src: lower, msg: igmp.AppendQuery(nil, igmp.QueryFields{MaxResp: 10 * time.Second, QRV: 2})},
			{at: 31.25}, // no startup query: not the querier
			{at: 40, msg: igmp.AppendV2(nil, igmp.TypeLeave, grp, 0)}, // ignored by a non-querier
			{at: 50, src: lower, msg: igmp.AppendQuery(nil, igmp.QueryFields{Group: grp, MaxResp: time.Second, QRV: 2})},
			{at: 52, gone: []igmp.Event{{Kind: igmp.Left, Group: grp}}},
			{at: 304.9},
			{at: 305, queries: []igmp.Query{general}}, // 255 s after its last query
		})},
		{"a higher querier defers to us", concat(startup, []step{
			{at: 2, src: host, msg: igmp.AppendQuery(nil, igmp.QueryFields{MaxResp: 10 * time.Second})},
			{at: 31.25, queries: []igmp.Query{general}},
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			tb := igmp.NewTable(igmp.Options{Addr: self}, t0)
			for i, s := range tc.steps {
				now := t0.Add(time.Duration(s.at * float64(time.Second)))
				if next := tb.Next(); now.After(next) {
					t.Fatalf("step %d at %vs: Next said %v, after it: the test skips a deadline", i, s.at, next.Sub(t0))
				}
				var joined []igmp.Event
				if s.msg != nil {
					m, _, err := igmp.Parse(s.msg)
					if err != nil {
						t.Fatal(err)
					}
					src := s.src
					if !src.IsValid() {
						src = host
					}
					joined = tb.Heard(igmp.Packet{Src: src, Message: m}, now)
				}
				qs, gone := tb.Advance(now)
				if d := cmp.Diff(s.joined, joined, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
					t.Errorf("step %d at %vs: joined (-want +got):\n%s", i, s.at, d)
				}
				if d := cmp.Diff(s.queries, qs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
					t.Errorf("step %d at %vs: queries (-want +got):\n%s", i, s.at, d)
				}
				if d := cmp.Diff(s.gone, gone, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
					t.Errorf("step %d at %vs: gone (-want +got):\n%s", i, s.at, d)
				}
			}
		})
	}
}

func concat(s ...[]step) []step {
	var out []step
	for _, x := range s {
		out = append(out, x...)
	}
	return out
}
