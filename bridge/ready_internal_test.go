package bridge

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/portcounters"
)

// linkDouble is a leg whose link is up or down as the test says, with a
// quic leg's peer_why when down; withPort counts the reads that asked for
// a verbs port's counters.
type linkDouble struct {
	leg.Leg // nil: what Ready does not ask
	state   string
	up      bool
	why     string

	withPort int
}

func (l *linkDouble) Link(_ string, withPort bool) (string, bool, *portcounters.Port) {
	if withPort {
		l.withPort++
	}
	return l.state, l.up, nil
}
func (l *linkDouble) Status(st *leg.Status)                 { st.PeerWhy = l.why }
func (l *linkDouble) Health(time.Time, time.Duration) error { return nil }

// TestReady: a gateway is ready while every leg its routes and groups
// need is up; a leg down is named with its state and why, a route with a
// fallback needs its target's leg or its fallback's, and a leg nothing
// uses is needed by nothing. Health is unchanged by a leg down.
func TestReady(t *testing.T) {
	cfg, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
  - {name: q, kind: quic, ip: 127.0.10.5, peer: "127.0.10.6:7400", cert: c.pem, key: k.pem, ca: ca.pem}
  - {name: spare, kind: userspace, interface: lo, ip: 127.0.10.7, io: udp}
routes:
  - {name: out, listen: {leg: a, addr: "127.0.10.1:7471"}, target: {leg: q, addr: "127.0.10.4:7471"}}
  - {name: near, listen: {leg: a, addr: "127.0.10.1:7472"}, target: {leg: b, addr: "127.0.10.3:7471"},
     fallback: {leg: q, addr: "127.0.10.4:7472"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	const why = "the peer's certificate was refused: tls: unknown certificate authority"
	quicDown := &linkDouble{state: "no peer connection", why: why}
	for _, tc := range []struct {
		name string
		down map[string]*linkDouble // legs down; the others up
		want []string               // lines of Ready's error; none: ready
	}{
		{"every leg up", nil, nil},
		{"the tunnel down", map[string]*linkDouble{"q": quicDown},
			[]string{`bridge: gateway: route "out" reaches its target through: leg "q" (quic) is down: no peer connection: ` + why}},
		{"a target's leg down, its fallback up", map[string]*linkDouble{"b": {state: "down"}}, nil},
		{"a target's leg and its fallback down", map[string]*linkDouble{"b": {state: "down"}, "q": quicDown}, []string{
			`bridge: gateway: route "out" reaches its target through: leg "q" (quic) is down: no peer connection: ` + why,
			`bridge: gateway: route "near" reaches its target through neither: leg "b" (userspace) is down: down`,
		}},
		{"a listen leg down", map[string]*linkDouble{"a": {state: "lowerlayerdown"}}, []string{
			`bridge: gateway: route "out" listens on: leg "a" (userspace) is down: lowerlayerdown`,
		}},
		{"a leg no route uses down", map[string]*linkDouble{"spare": {state: "down"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Gateway{cfg: cfg, sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{},
				legs: map[string]leg.Leg{}, legStatus: map[string]leg.Status{},
				linkDown: map[string]error{}, linkDowns: map[string]*linkCounts{}, ipHeld: map[string]bool{},
				log: slog.New(slog.DiscardHandler)}
			for i := range cfg.Legs {
				l := &cfg.Legs[i]
				g.legStatus[l.Name] = legStatus(l)
				g.legs[l.Name] = &linkDouble{state: "up", up: true}
				if d := tc.down[l.Name]; d != nil {
					g.legs[l.Name] = d
				}
			}
			if err := g.Health(); err != nil {
				t.Errorf("health (liveness) with legs down: %v, want nil", err)
			}
			err := g.Ready()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("Ready:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for name := range g.legs { // the link watch's reads
				g.checkLink(name, linkByTimer)
			}
			for name, l := range g.legs {
				// An HCA's counters can be queries to its firmware.
				if d := l.(*linkDouble); d.withPort != 0 {
					t.Errorf("leg %s: Ready and the link watch read its port's counters %d times, want its state only", name, d.withPort)
				}
			}
		})
	}
}
