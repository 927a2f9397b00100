package igmp

import (
	"net/netip"
	"slices"
	"time"
)

// The defaults of RFC 3376 section 8.
const (
	DefaultRobustness              = 2
	DefaultQueryInterval           = 125 * time.Second
	DefaultQueryResponseInterval   = 10 * time.Second
	DefaultLastMemberQueryInterval = time.Second
)

// Options configures a Table.
type Options struct {
	// Addr is this router's address on the link: its queries' source, and
	// what the querier election compares (the lower address queries). Its
	// family is the table's: IPv4 (IGMP), or IPv6 (MLD), where it must be
	// the interface's link-local address (RFC 3810 section 5: hosts
	// ignore queries from any other).
	Addr netip.Addr
	// Robustness, QueryInterval, QueryResponseInterval and
	// LastMemberQueryInterval are RFC 3376's (the defaults above when
	// zero).
	Robustness              int
	QueryInterval           time.Duration
	QueryResponseInterval   time.Duration
	LastMemberQueryInterval time.Duration
}

// A Table is the membership of one link's groups, as its querier (or a
// router that is not, while another queries) keeps it.
//
// Each group:
//
//	           report                    leave, while querier; or the
//	(unknown) --------> member ------------------------------------------+
//	                    ^  | no report for the group membership         |
//	          report:   |  | interval (260 s): Left, expired            v
//	          back to   |  +-------------------------------------->  checking: queried
//	          member    +----------------------------------------- (2 x 1 s apart), or
//	                                                                the querier's group
//	                        no report for the last member query     query heard
//	                        time (2 s): Left, left  <--------------------+
//
// The link's querier:
//
//	querier --(a query from a lower address)--> other querier present
//	other querier present --(a lower address's query)--> (its timer restarts: 255 s)
//	other querier present --(255 s without one)--> querier (a general query at once)
//
// A querier sends general queries every QueryInterval, the first
// Robustness of them a quarter of it apart (the startup queries).
type Table struct {
	o Options
	// derived from o
	gmi, lmqt, oqpi, sqi time.Duration

	groups      map[netip.Addr]*member
	querier     bool
	otherUntil  time.Time // while !querier: when the other querier counts as gone
	nextGeneral time.Time // while querier: the next general query
	startupLeft int       // general queries still to send a quarter interval apart
}

// member is a group with members on the link.
type member struct {
	expires time.Time // no report by then: the group is gone
	lmqLeft int       // group-specific queries still to send
	nextLMQ time.Time
	left    bool // the timer runs from a leave (checking): Left says "left"
}

// EventKind says what happened to a group.
type EventKind uint8

const (
	// Joined: the first report of a group the table did not hold.
	Joined EventKind = iota
	// Left: a member left and no other answered the group's queries.
	Left
	// Expired: no report for the group membership interval.
	Expired
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Left:
		return "left"
	case Expired:
		return "expired"
	}
	return "EventKind(?)"
}

// Event is a change of a group's membership.
type Event struct {
	Kind  EventKind
	Group netip.Addr
}

// Query is a query to send: Group unspecified for a general one.
type Query struct {
	Group   netip.Addr
	MaxResp time.Duration
}

// NewTable returns an empty table that is the link's querier from now (its
// first general query is due at now).
func NewTable(o Options, now time.Time) *Table {
	if o.Robustness <= 0 {
		o.Robustness = DefaultRobustness
	}
	if o.QueryInterval <= 0 {
		o.QueryInterval = DefaultQueryInterval
	}
	if o.QueryResponseInterval <= 0 {
		o.QueryResponseInterval = DefaultQueryResponseInterval
	}
	if o.LastMemberQueryInterval <= 0 {
		o.LastMemberQueryInterval = DefaultLastMemberQueryInterval
	}
	r := time.Duration(o.Robustness)
	return &Table{o: o, gmi: r*o.QueryInterval + o.QueryResponseInterval, lmqt: r * o.LastMemberQueryInterval,
		oqpi: r*o.QueryInterval + o.QueryResponseInterval/2, sqi: o.QueryInterval / 4,
		groups: map[netip.Addr]*member{}, querier: true, nextGeneral: now, startupLeft: o.Robustness}
}

// MembershipInterval is how long a group lasts without a report (RFC 3376
// section 8.4: Robustness x QueryInterval + QueryResponseInterval).
func (t *Table) MembershipInterval() time.Duration { return t.gmi }

// Querier reports whether the table queries the link (no lower address
// has been heard querying lately).
func (t *Table) Querier() bool { return t.querier }

// Groups returns the groups with members, in address order.
func (t *Table) Groups() []netip.Addr {
	gs := make([]netip.Addr, 0, len(t.groups))
	for g := range t.groups {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, netip.Addr.Compare)
	return gs
}

// Forget drops group at once, with no event (a group the caller will not
// take: the next report makes it Joined again).
func (t *Table) Forget(group netip.Addr) { delete(t.groups, group) }

// Routable reports whether a group's membership is kept: a multicast
// address outside the link-local block (224.0.0.0/24; IPv6 scopes 1 and
// 2, interface- and link-local), which no router forwards.
func Routable(group netip.Addr) bool {
	return group.IsMulticast() && !group.IsLinkLocalMulticast() && !group.IsInterfaceLocalMulticast()
}

// Heard takes a message heard on the link at now and returns the groups it
// made Joined. The table's own queries (from Options.Addr) are ignored.
func (t *Table) Heard(p Packet, now time.Time) []Event {
	if p.Src == t.o.Addr {
		return nil
	}
	var ev []Event
	report := func(g netip.Addr) {
		if !Routable(g) || g.BitLen() != t.o.Addr.BitLen() {
			return
		}
		m := t.groups[g]
		if m == nil {
			m = &member{}
			t.groups[g] = m
			ev = append(ev, Event{Kind: Joined, Group: g})
		}
		*m = member{expires: now.Add(t.gmi)}
	}
	m := p.Message
	switch m.Type {
	case TypeQuery:
		t.heardQuery(p, now)
	case TypeReportV1, TypeReportV2:
		report(m.Group)
	case TypeLeave:
		t.leave(m.Group, now)
	case TypeReportV3:
		for _, r := range m.Records {
			switch {
			case r.Type == ModeIsExclude || r.Type == ChangeToExcludeMode:
				report(r.Group)
			case (r.Type == ModeIsInclude || r.Type == ChangeToIncludeMode || r.Type == AllowNewSources) && r.Sources > 0:
				report(r.Group) // sources are not tracked: the group is taken whole
			case r.Type == ModeIsInclude || r.Type == ChangeToIncludeMode || r.Type == BlockOldSources:
				// TO_IN({}) (IS_IN({})) is a host's leave; BLOCK may
				// remove its last source: query whether members remain.
				t.leave(r.Group, now)
			}
		}
	}
	return ev
}

// heardQuery runs the querier election, and as a non-querier follows the
// querier's group-specific queries (RFC 3376 section 6.6.1).
func (t *Table) heardQuery(p Packet, now time.Time) {
	if p.Src.BitLen() != t.o.Addr.BitLen() || p.Src.Compare(t.o.Addr) >= 0 {
		return // a higher address defers to us (its own election)
	}
	t.querier, t.otherUntil = false, now.Add(t.oqpi)
	m := t.groups[p.Message.Group]
	if m == nil || p.Message.SuppressRouter {
		return
	}
	lmqc := time.Duration(t.o.Robustness)
	if p.Message.QRV > 0 { // IGMPv3, MLDv2
		lmqc = time.Duration(p.Message.QRV)
	}
	if until := now.Add(lmqc * p.Message.MaxResp); until.Before(m.expires) {
		m.expires, m.left = until, true
	}
}

// leave starts the last member queries of group, when the table is the
// querier (a non-querier waits for the querier's).
func (t *Table) leave(group netip.Addr, now time.Time) {
	m := t.groups[group]
	if m == nil || !t.querier {
		return
	}
	if until := now.Add(t.lmqt); until.Before(m.expires) {
		m.expires = until
	}
	m.left, m.lmqLeft, m.nextLMQ = true, t.o.Robustness, now
}

// Advance moves the table's clock to now: it returns the queries due (in
// the order to send them) and the groups gone (Left or Expired, in address
// order), which it drops.
func (t *Table) Advance(now time.Time) ([]Query, []Event) {
	var qs []Query
	if !t.querier && !now.Before(t.otherUntil) {
		t.querier, t.nextGeneral = true, now
	}
	if t.querier && !now.Before(t.nextGeneral) {
		qs = append(qs, Query{Group: t.unspecified(), MaxResp: t.o.QueryResponseInterval})
		next := t.o.QueryInterval
		if t.startupLeft > 0 {
			t.startupLeft--
			if t.startupLeft > 0 {
				next = t.sqi
			}
		}
		t.nextGeneral = now.Add(next)
	}
	var gone []Event
	for _, g := range t.Groups() {
		m := t.groups[g]
		if !now.Before(m.expires) {
			k := Expired
			if m.left {
				k = Left
			}
			gone = append(gone, Event{Kind: k, Group: g})
			delete(t.groups, g)
			continue
		}
		if m.lmqLeft > 0 && !now.Before(m.nextLMQ) {
			m.lmqLeft--
			m.nextLMQ = now.Add(t.o.LastMemberQueryInterval)
			if t.querier {
				qs = append(qs, Query{Group: g, MaxResp: t.o.LastMemberQueryInterval})
			}
		}
	}
	return qs, gone
}

// unspecified is the group of a general query: the unspecified address
// of the table's family.
func (t *Table) unspecified() netip.Addr {
	if t.o.Addr.Is6() {
		return netip.IPv6Unspecified()
	}
	return netip.IPv4Unspecified()
}

// Next is when Advance next has something to do.
func (t *Table) Next() time.Time {
	next := t.nextGeneral
	if !t.querier {
		next = t.otherUntil
	}
	for _, m := range t.groups {
		if m.expires.Before(next) {
			next = m.expires
		}
		if m.lmqLeft > 0 && m.nextLMQ.Before(next) {
			next = m.nextLMQ
		}
	}
	return next
}
