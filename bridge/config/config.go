// Package config reads rbridge's gateway configuration: the legs (a verbs
// device, or rbridge's userspace RoCEv2 transport on an Ethernet interface)
// and the routes (a listen address on one leg, a target on the other, and
// the clients allowed). The file is YAML:
//
//	legs:
//	  - name: ib                    # any name; routes refer to it
//	    kind: verbs                 # a libibverbs device: IB HCA, RoCE HCA, rxe (siw: two-sided only)
//	    ip: 198.18.3.1              # the gateway's address on this fabric; picks device, port and GID
//	    device: rxe2                # optional, checked against ip
//	    port: 1                     # optional
//	  - name: roce
//	    kind: userspace             # rbridge's own RoCEv2 transport on an Ethernet interface
//	    interface: vgw0
//	    ip: 198.18.1.3
//	    io: afxdp                   # afxdp (default) or udp
//	    netns: user0                # optional: the network namespace that holds the interface
//	    mtu: 1024                   # optional: a path MTU below the interface's (256 to 4096)
//	    busy_poll: true             # optional (a userspace or verbs leg): the leg's receive loop spins on a thread of its own, a CPU
//	    busy_poll_cpus: [4]         # optional, with busy_poll: pin that loop to CPU 4
//	    busy_poll_idle: 10ms        # optional, with busy_poll: nap after this long without traffic (default: never)
//	    queues: 4                   # optional (io: udp): receive loops, a socket each (default: the CPUs, at most 16)
//	  - name: gw-b
//	    kind: quic                  # another rbridge gateway, over QUIC with mutual TLS
//	    ip: 10.0.0.1                # this gateway's address toward it
//	    listen: "10.0.0.1:7471"     # optional: accept the peer's connection here
//	    peer: "10.0.0.2:7471"       # optional: connect to the peer there (one of listen, peer at least)
//	    cert: /etc/rbridge/gw-a.crt # this gateway's certificate and key, PEM
//	    key: /etc/rbridge/gw-a.key
//	    ca: /etc/rbridge/ca.crt     # the CA the peer's certificate must be signed by
//	    peer_name: gw-b             # optional: a name the peer's certificate must carry (else its IP when dialing)
//	    over: ib                    # optional: a verbs leg; the tunnel runs over the IPoIB interface of its port
//	routes:
//	  - name: storage
//	    listen: {leg: ib, addr: "198.18.3.1:4420"}    # where clients connect (rdma_cm address and port)
//	    target: {leg: roce, addr: "198.18.1.2:4420"}  # where rbridge connects on their behalf
//	    allow: ["198.18.3.0/24"]                      # optional: client addresses allowed; default any
//	    fallback: {leg: gw-b, addr: "198.18.1.2:4420"} # optional: when the target cannot be reached here, through gw-b
//	                                  # (also after: 3s, how long the target gets to answer; retry: 15s, how often it is tried again)
//	    protocol: nvme                                # optional, RC routes: the protocol carried, its messages parsed and counted
//	  - name: feed-lookup                             # a UD service (rdma_cm's UDP port space: udaddy, SIDR)
//	    ud: true                                      # optional, default false: datagrams, not connections
//	    listen: {leg: roce, addr: "198.18.1.3:7174"}
//	    target: {leg: ib, addr: "198.18.3.2:7174"}
//	    rate: {packets: 5000}                         # optional, UD routes only: as a group's, per direction, all clients together
//	  - name: far-storage                             # a target behind another gateway
//	    listen: {leg: roce, addr: "198.18.1.3:4421"}
//	    target: {leg: gw-b, addr: "198.18.9.2:4420"}  # gw-b's route listening on leg gw-a for this address
//	groups:                         # optional: IP multicast groups relayed between the fabrics (UD)
//	  - name: ticks
//	    group: 239.1.1.1
//	    roce: roce                  # the userspace leg (io: udp or afxdp)
//	    ib: ib                      # the other leg (verbs)
//	    direction: both             # both (default), ib_to_roce or roce_to_ib
//	    mgid: rdma_cm               # the MGID form on an InfiniBand ib leg: rdma_cm (default) or ipoib
//	    peers: [198.18.1.9]         # optional: other gateways' leg addresses on these fabrics: never relayed
//	    loop_window: 500ms          # optional: how long the same bytes from another source are a loop (default; 0 off)
//	    rate:                       # optional: a limit per direction, a second; each key optional
//	      packets: 10000            # datagrams a second
//	      burst_packets: 1000       # the most at once (default a tenth of packets, at least 1)
//	      bytes: 50MB               # payload bytes a second: B, kB, MB, GB (1000s), KiB, MiB, GiB (1024s)
//	      burst_bytes: 5MB          # the most at once (default a tenth of bytes, at least 4096)
//	    busy_poll: true             # optional: each receive loop spins on its own thread, a CPU each
//	    busy_poll_cpus: [2, 3]      # optional, with busy_poll: pin roce_to_ib's loop to 2, ib_to_roce's to 3
//	    busy_poll_idle: 10ms        # optional, with busy_poll: each loop naps after this long without a datagram (default: never)
//	  - name: feeds                 # every group members on one side join (IGMP), relayed to them from the other
//	    joined_on: ib               # ib or roce: the members' side (an Ethernet link: IGMP); no group:, no direction:
//	    roce: roce
//	    ib: ib
//	    within: 239.0.0.0/8         # optional: only groups in this prefix (default 224.0.0.0/4; ff00::/8 between IPv6 legs)
//	    max_groups: 64              # optional: the most taken at once (default 64); the rest counted, not joined
//	admin:
//	  listen: "127.0.0.1:9479"      # optional: /metrics, /status, /healthz and /livez over HTTP; this is the default, "" turns it off
//	  control: /run/rbridge/control.sock  # optional: the unix socket rbridge reload uses (mode 0600); the default for root, "" turns it off
//	  hosts: [gw1.example.com]      # optional: names the admin server answers besides localhost and IP addresses
//	pool:
//	  size: 512MiB                  # optional: the gateway's memory pool, pinned on each verbs and AF_XDP leg (default 128MiB; 16MiB to 64GiB)
//
// A route with ud: true crosses rdma_cm's UDP port space: the gateway
// answers a client's service ID resolution (SIDR_REQ) for the listen
// address only once the target's answered the same on the other leg, and
// then relays datagrams between a pair of its own UD QPs made for that
// client (one on each leg), with their immediate data, each side seeing
// the Q_Key its own resolution gave. UD stays UD: nothing is acknowledged
// or resent, and what cannot cross (longer than the far leg's MTU, no
// buffer) is dropped and counted. UD routes are on userspace and verbs
// legs; their listen address may share a port with an RC route's (the
// port spaces differ), not with another UD route's. A UD route may have a
// rate limit (rate:, as a group's): per direction, shared by all the
// route's clients, so that it bounds what reaches the target (and the
// clients) whatever their number; an RC route may not (its transport's
// flow control paces it, and a reliable connection cannot drop).
//
// A group's rate limit applies to each direction on its own: a token
// bucket for datagrams and one for bytes, as given; a datagram that finds
// either short is dropped (UD: nothing is resent) and counted under cause
// "rate". A reload may change a group's rate (the running group takes the
// new one at once); any other change to the groups is refused. A UD
// route's rate changes so too: a reload that changes only its rate leaves
// the route and its clients running under the new limit.
//
// A group's busy_poll trades a CPU per direction for latency: each of its
// receive loops runs on an OS thread of its own that polls, never sleeps
// and never yields: a verbs leg's HCA completion queue (no completion
// channel), or a userspace leg's group socket (io: udp: non-blocking
// recvmmsg, SO_BUSY_POLL) or group queue (io: afxdp: the datagrams the
// leg's AF_XDP socket received for the group) and its QP's completion
// queue, in one loop. It keeps that
// CPU busy while the gateway runs, traffic or not, so the process needs
// more CPUs (GOMAXPROCS) than it has busy-poll loops; busy_poll_cpus pins
// the loops to CPUs kept for them. A group's busy_poll is the group's
// alone: the CPUs a group takes are in its own lines, and UD routes'
// clients (a pair of QPs each, up to 256) are never busy-polled.
//
// A leg's busy_poll does the same for its RC sessions, at a CPU for the
// leg: its one receive loop runs on a thread of its own that reads the
// leg's socket without waiting (a userspace leg, io: udp only for now)
// and polls its sessions' completion queues (a verbs leg's have no
// completion channel then), and the sessions' relay runs on that thread.
// It is refused on quic legs and io: afxdp legs.
//
// A group with joined_on names a side instead of a group: every group a
// member on that side joins (its IGMP or MLD reports, heard on the leg's
// interface or, for a verbs leg, its port's netdev) within its prefix is
// relayed to that side from the other, as a group of its own named
// "<name>/<address>" that takes the entry's rate, peers, loop_window and
// mgid; the direction is the side's (joined_on ib: roce_to_ib), and
// busy_poll is refused (each group found would hold CPUs).
//
// On a quic leg a route's addresses name the far end, not this gateway:
// a route whose target is on a quic leg asks the peer gateway for that
// address, and the peer's route that listens on its quic leg for the
// same address takes the session (its target is on one of its own legs).
//
// The file is one YAML document. Anchors, aliases and merge keys are read
// as YAML has them, so that legs or routes may share settings:
//
//	legs:
//	  - &roce {name: roce0, kind: userspace, interface: vgw0, ip: 198.18.1.3, io: udp}
//	  - <<: *roce                   # roce0's keys, but for those given here
//	    name: roce1
//	    interface: vgw1
//	    ip: 198.18.2.3
//
// What is wrong in a value an alias or a merge key brought is reported at
// the line that used it.
//
// The keys are a contract (other tools write the file): they are extended,
// never renamed. Parse refuses a bad file before anything starts, naming
// the file, the line and what is wrong (and Load one above MaxFileSize,
// 1 MiB, unread past it); Check adds what only the machine
// can tell (an interface or a device that is missing).
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is a gateway's configuration.
type Config struct {
	Legs   []Leg   `yaml:"legs"`
	Routes []Route `yaml:"routes"`
	Groups []Group `yaml:"groups"`
	Admin  Admin   `yaml:"admin"`
	Pool   Pool    `yaml:"pool"`

	file    string
	errs    []lineError     // the top level's, found by decode
	notList map[string]bool // legs:, routes: or groups: given, not as a list (or the file not a mapping)
}

// Leg kinds.
const (
	KindVerbs     = "verbs"
	KindUserspace = "userspace"
	KindQUIC      = "quic"
)

// Packet I/O of a userspace leg.
const (
	IOAFXDP = "afxdp"
	IOUDP   = "udp"
)

// Leg is one fabric the gateway sits on.
type Leg struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`
	// IP is the gateway's address on this fabric.
	IP netip.Addr `yaml:"ip"`
	// Device and Port (verbs) name the RDMA device and port; they are
	// found from IP when not given, and checked against it when given.
	Device string `yaml:"device"`
	Port   int    `yaml:"port"`
	// Interface, IO and Netns (userspace) name the Ethernet interface, the
	// packet I/O on it and the network namespace that holds it.
	Interface string `yaml:"interface"`
	IO        string `yaml:"io"`
	Netns     string `yaml:"netns"`
	// MTU (userspace) caps the leg's path MTU below what its interface
	// carries: 256, 512, 1024, 2048 or 4096 (0: the interface's).
	MTU int `yaml:"mtu"`
	// ECN (userspace) makes the leg's RC QPs send ECN-capable packets and
	// cut their rate on CNPs (DCQCN's reaction point), as a RoCE NIC with
	// DCQCN on does. Without it they ignore CNPs (counted). Either way
	// the leg answers ECN-CE marked packets with CNPs.
	ECN bool `yaml:"ecn"`
	// UDPOffload (userspace, io: udp), when false, turns off the kernel's
	// UDP segmentation and receive offloads (GSO and GRO) on the leg's
	// socket; unset or true, they are on where the kernel has them
	// (NoUDPOffload says which).
	UDPOffload *bool `yaml:"udp_offload"`
	// FreeBind (userspace, io: udp) lets the leg's ip be an address the
	// interface does not hold yet: a floating address (a VRRP virtual
	// IP) that keepalived moves to this gateway when the one holding it
	// fails. The leg's socket is bound to it all the same (IP_FREEBIND),
	// so a standby gateway runs warm and answers the moment the address
	// arrives; readiness does not wait for it. Without it, an ip the
	// interface does not hold is refused (a typo stays an error).
	FreeBind bool `yaml:"freebind"`
	// Listen, Peer, Cert, Key, CA and PeerName (quic) say where the
	// gateway accepts its peer gateway's connection and where it
	// connects to it, and the mutual TLS of both.
	Listen   string `yaml:"listen"`
	Peer     string `yaml:"peer"`
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	CA       string `yaml:"ca"`
	PeerName string `yaml:"peer_name"`
	// Over (quic) names a verbs leg: the tunnel runs over the IPoIB
	// interface of that leg's port, which must hold IP.
	Over string `yaml:"over"`
	// Receives and ReceiveSize (verbs) are the receives each of the leg's
	// connections keeps posted (default 16, at most 1024) and their size
	// in bytes (default 65536: the largest SEND a peer may send; 256 to
	// 65536, a power of two). A peer that may have more SENDs in flight
	// than Receives meets RNR NAKs, which some protocols never expect
	// (RPC-over-RDMA grants its client as many as its server's credits,
	// 64 for nfsd, of at most its inline size, 4 KiB by default).
	Receives    int `yaml:"receives"`
	ReceiveSize int `yaml:"receive_size"`
	// BusyPoll (userspace with io: udp, verbs) makes the leg's receive
	// loop spin on an OS thread of its own, a CPU, traffic or not: a
	// userspace leg's loop reads its socket without waiting and polls
	// its sessions' CQs; a verbs leg's polls its sessions' CQs, which
	// have no completion channel. A session's relay runs on the loop's
	// thread, with no goroutine woken on the way. BusyPollCPUs (with
	// BusyPoll) pins the loop's thread to the one CPU it names.
	// BusyPollIdle (with BusyPoll) has the loop nap once it has found no
	// work for that long: it sleeps between rounds (at most
	// leg.MaxNap, 1 ms) until a round finds work again, so the CPU is
	// held while traffic flows, not at rest; 0 (the default, or 0s)
	// never naps.
	BusyPoll     bool          `yaml:"busy_poll"`
	BusyPollCPUs []int         `yaml:"busy_poll_cpus"`
	BusyPollIdle time.Duration `yaml:"busy_poll_idle"`
	// Queues (userspace legs) is how many receive loops the leg runs.
	// With io: udp each has a socket of its own bound to the leg's
	// address (SO_REUSEPORT, steered by destination QP: a QP is served
	// by one loop); 0 is the default, chosen when the leg opens from the
	// CPUs the process may use (at most DefaultMaxQueues; 1 with
	// busy_poll). With io: afxdp each is an AF_XDP socket on one of the
	// interface's receive queues, 0 to Queues-1; 0 is the default, every
	// receive queue the interface has (a busy-polled leg's one loop polls
	// them all).
	Queues int `yaml:"queues"`

	line         int
	keys         keyLines
	notMapping   bool        // said in errs; nothing more to say
	errs         []lineError // what is wrong, named with the leg in validate
	listen, peer netip.AddrPort
}

// MaxQueues bounds a leg's queues (roce.MaxQueues); DefaultMaxQueues
// bounds the default, chosen from the CPUs the process may use.
const (
	MaxQueues        = 256
	DefaultMaxQueues = 16
)

// MaxReceives bounds a verbs leg's receives per connection.
const MaxReceives = 1024

// Same reports whether two legs are configured alike, whatever the lines
// they were read from: every field the file gives is compared.
func (l Leg) Same(o Leg) bool {
	l.line, o.line, l.keys, o.keys, l.errs, o.errs = 0, 0, nil, nil, nil, nil
	return reflect.DeepEqual(l, o)
}

// ListenAddr is a quic leg's parsed Listen (not valid when not given).
func (l *Leg) ListenAddr() netip.AddrPort { return l.listen }

// PeerAddr is a quic leg's parsed Peer (not valid when not given).
func (l *Leg) PeerAddr() netip.AddrPort { return l.peer }

// DefaultAdminListen is where the admin server listens when the file has
// no admin key: local only.
const DefaultAdminListen = "127.0.0.1:9479"

// DefaultAdminControl is the control socket's path when the file gives
// none, for a gateway run as root (DefaultControl says which path a
// gateway run by another user takes).
const DefaultAdminControl = "/run/rbridge/control.sock"

// maxSocketPath is the longest path a unix socket may have: sockaddr_un's
// sun_path holds 108 bytes, the last a NUL.
const maxSocketPath = 107

// DefaultControl is the control socket's path when the file gives none:
// DefaultAdminControl for root; for another user, rbridge/control.sock in
// its runtime directory ($XDG_RUNTIME_DIR, the user's own, as /run is
// root's), or DefaultAdminControl when it has none.
func DefaultControl() string {
	if os.Geteuid() != 0 {
		if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
			if p := filepath.Join(d, "rbridge", "control.sock"); len(p) <= maxSocketPath {
				return p
			}
		}
	}
	return DefaultAdminControl
}

// Admin is the gateway's operator endpoints: the admin HTTP server, which
// serves what reads (metrics, status, health) over TCP, and the control
// socket, which takes what changes the gateway (a reload) from local
// processes alone.
type Admin struct {
	// Listen is the admin server's address, an IP and a port
	// ("127.0.0.1:9479"; port 0 lets the kernel pick); empty: no admin
	// server. Without the key it is DefaultAdminListen.
	Listen string `yaml:"listen"`
	// Control is the path of the control socket, a unix domain socket
	// (mode 0600, in a directory made 0700 when missing); empty: none (a
	// reload is then SIGHUP's alone). Without the key it is
	// DefaultControl().
	Control string `yaml:"control"`
	// Hosts are the names, besides localhost, that the admin server
	// answers requests addressed to (their Host header); an IP address is
	// always answered. A name not listed is refused: a web page whose
	// name was rebound to the gateway's address (DNS rebinding) cannot
	// read it. Lower-case, without a trailing dot.
	Hosts []string `yaml:"hosts"`

	line        int // admin.listen's, else the admin key's
	controlLine int // admin.control's (0: not given)
	given       bool
	errs        []lineError
	listen      netip.AddrPort
}

// Line is where admin.listen is in its file (the admin key's line when
// it has none; 0 when the file has no admin key).
func (a *Admin) Line() int { return a.line }

// ControlLine is where admin.control is in its file (0 when it is not).
func (a *Admin) ControlLine() int { return a.controlLine }

// Addr is the parsed Listen address; it is not valid when the admin
// server is off.
func (a *Admin) Addr() netip.AddrPort { return a.listen }

// Endpoint is where a route listens or connects.
type Endpoint struct {
	Leg  string         `yaml:"leg"`
	Addr netip.AddrPort `yaml:"addr"`

	line int
	errs []lineError
}

// Fallback is a route's target through a peer gateway, and its timers.
type Fallback struct {
	Endpoint
	// After is how long a new session waits for the route's own target to
	// answer before it goes through the fallback (0: the gateway's
	// default, 3 s); Retry is how often, while on the fallback, a new
	// session tries the target again (0: the default, 15 s).
	After time.Duration `yaml:"after"`
	Retry time.Duration `yaml:"retry"`
}

// UnmarshalYAML decodes a fallback from its node.
func (f *Fallback) UnmarshalYAML(n *yaml.Node) error {
	f.line = n.Line
	vals, errs := mapping(n, "fallback", "leg", "addr", "after", "retry")
	scalar(vals, "leg", "fallback", &f.Leg, &errs)
	f.Addr, _ = parsed(vals, "addr", "fallback", netip.ParseAddrPort, wantAddrPort, &errs)
	for _, k := range []struct {
		key string
		dst *time.Duration
	}{{"after", &f.After}, {"retry", &f.Retry}} {
		d, line := parsed(vals, k.key, "fallback", time.ParseDuration, wantDuration, &errs)
		switch {
		case line != 0 && (d <= 0 || d > maxFallbackTimer): // given, and a duration
			errs = append(errs, lineError{line, fmt.Sprintf("fallback: %s %v: want a duration above 0 and at most %v", k.key, vals[k.key].Value, maxFallbackTimer)})
		default:
			*k.dst = d
		}
	}
	f.errs = errs
	return nil
}

// Route joins a listen address on one leg to a target on the other.
type Route struct {
	Name   string         `yaml:"name"`
	Listen Endpoint       `yaml:"listen"`
	Target Endpoint       `yaml:"target"`
	Allow  []netip.Prefix `yaml:"allow"`
	// Fallback, when its Leg is set, is the target through a peer gateway
	// (a quic leg) that new sessions use while Target cannot be reached.
	Fallback Fallback `yaml:"fallback"`
	// UD makes the route one of rdma_cm's UDP port space (SIDR and
	// datagrams) instead of its TCP one (RC connections).
	UD bool `yaml:"ud"`
	// Rate (UD routes only) limits the datagrams the route relays, in
	// each direction on its own, across all its clients together; the
	// zero Rate has no limit.
	Rate Rate `yaml:"rate"`
	// Protocol (RC routes only) names the upper-layer protocol the route
	// carries (ProtocolNVMe, ProtocolNFS, ProtocolISER, ProtocolSRP), whose messages
	// its sessions parse in both directions; "" relays them as they are.
	Protocol string `yaml:"protocol"`
	// Liveness (RC routes only) is how long a session may be idle before
	// it probes both its connections (a zero-length RDMA WRITE each); a
	// peer that does not answer within its transport's retries ends the
	// session. Unset is DefaultLiveness; LivenessOff turns it off.
	Liveness time.Duration `yaml:"liveness"`

	line         int
	keys         keyLines
	notMapping   bool        // said in errs; nothing more to say
	errs         []lineError // what is wrong, named with the route in validate
	rateLine     int         // where rate: is (0: not given)
	rateErrs     []lineError // named with the route in validate
	protocolLine int         // where protocol: is (0: not given)
	livenessLine int         // where liveness: is (0: not given)
}

// A route's liveness: the default, the value that turns it off (liveness:
// 0s), and the bounds of what may be given.
const (
	DefaultLiveness time.Duration = 30 * time.Second
	LivenessOff     time.Duration = -1
	minLiveness                   = time.Second
	maxLiveness                   = 24 * time.Hour
)

// Upper-layer protocols a route may carry.
const (
	// ProtocolNVMe is NVMe over Fabrics on RDMA: the listen side is the
	// host, the target side the controller (its subsystem's port).
	ProtocolNVMe = "nvme"
	// ProtocolNFS is NFS over RDMA, RPC-over-RDMA version 1 (RFC 8166):
	// the listen side is the client, the target side the server (nfsd's
	// rdma port, 20049).
	ProtocolNFS = "nfs"
	// ProtocolISER is iSER (iSCSI Extensions for RDMA): the listen side
	// is the initiator, the target side the iSCSI target's portal.
	ProtocolISER = "iser"
	// ProtocolSRP is the SCSI RDMA Protocol over RDMA/CM: the listen side
	// is the initiator, the target side the SRP target's RDMA/CM port.
	ProtocolSRP = "srp"
)

// Protocols are the protocols a route may name, in the order errors list
// them.
var Protocols = []string{ProtocolNVMe, ProtocolNFS, ProtocolISER, ProtocolSRP}

// unservedProtocols are protocols a route may not name, with why.
var unservedProtocols = map[string]string{
	// SMB Direct (MS-SMBD) carries its buffer descriptors inside SMB2
	// READ and WRITE requests, which SMB 3.x signs or encrypts: the
	// gateway cannot rewrite them to its staging without breaking the
	// signature, and cannot read them at all when encrypted.
	"smb": "SMB Direct cannot be staged: its buffer descriptors sit inside SMB2 messages that SMB 3.x signs or encrypts, so rewriting them would break the signature; carry SMB Direct only where its one-sided initiator (the server) is behind the userspace leg, on a route without a protocol",
}

// Same reports whether two routes are configured alike, whatever the
// lines they were read from and their rate limits (which a reload changes
// in place): every other field the file gives is compared, so that a new
// field never reads as unchanged.
func (r Route) Same(o Route) bool {
	return reflect.DeepEqual(r.normalized(), o.normalized())
}

// normalized is r without what Same ignores.
func (r Route) normalized() Route {
	r.Rate, r.line, r.keys, r.notMapping, r.errs, r.rateLine, r.rateErrs, r.protocolLine = Rate{}, 0, nil, false, nil, 0, nil, 0
	for _, e := range []*Endpoint{&r.Listen, &r.Target, &r.Fallback.Endpoint} {
		e.line, e.errs = 0, nil
	}
	r.Fallback.line, r.Fallback.errs = 0, nil
	if len(r.Allow) == 0 {
		r.Allow = nil
	}
	return r
}

// Line is where the leg is defined in its file.
func (l *Leg) Line() int { return l.line }

// Line is where the route is defined in its file.
func (r *Route) Line() int { return r.line }

// File is the name the configuration was parsed under.
func (c *Config) File() string { return c.file }

// Allowed reports whether a client at addr may use the route.
func (r *Route) Allowed(addr netip.Addr) bool {
	if len(r.Allow) == 0 {
		return true
	}
	addr = addr.Unmap()
	for _, p := range r.Allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Leg returns the leg named name.
func (c *Config) Leg(name string) (*Leg, bool) {
	for i := range c.Legs {
		if c.Legs[i].Name == name {
			return &c.Legs[i], true
		}
	}
	return nil, false
}

// Error is a problem in a configuration file, at a line.
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Errors is every problem Parse found.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Load reads (ReadFile: at most MaxFileSize) and parses the file at path.
func Load(path string) (*Config, error) {
	b, err := ReadFile(path)
	var es Errors
	switch {
	case errors.As(err, &es):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, b)
}

// yamlLine finds "line N" in the YAML decoder's messages.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Parse parses and validates a configuration; name is the file's name in
// errors, which are of type Errors. b above MaxFileSize is refused.
func Parse(name string, b []byte) (*Config, error) {
	root, es := document(name, b)
	if es != nil {
		return nil, es
	}
	c := &Config{file: name}
	c.decode(root)
	if es := c.validate(); len(es) > 0 {
		return nil, es
	}
	return c, nil
}

func yamlError(file, msg string) *Error {
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		var line int
		fmt.Sscan(m[1], &line)
		return &Error{File: file, Line: line, Msg: m[2]}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

// The file is decoded in three steps: its YAML document read, aliases and
// merge keys resolved (document), then each leg, route and endpoint from
// its YAML node (decode, UnmarshalYAML: keys checked, values parsed, every
// problem kept with the line of its value), then validate, which checks
// the whole.

// decode fills c from the file's root node (resolved: no alias, no merge
// key), every problem kept with its line for validate.
func (c *Config) decode(root *yaml.Node) {
	vals, errs := mapping(root, "", "legs", "routes", "groups", "admin", "pool")
	c.notList = map[string]bool{}
	if vals == nil { // not a mapping: said so, and there is nothing more to say
		c.notList = map[string]bool{"legs": true, "routes": true, "groups": true}
	}
	items := func(key, of string) []*yaml.Node {
		n := vals[key]
		switch {
		case n == nil || isNull(n):
			return nil
		case n.Kind != yaml.SequenceNode:
			errs = append(errs, lineError{n.Line, fmt.Sprintf("%s: want a list of %s, got %s", key, of, describe(n))})
			c.notList[key] = true
			return nil
		}
		return n.Content
	}
	if legs := items("legs", "legs"); len(legs) > 0 {
		c.Legs = make([]Leg, len(legs))
		for i, n := range legs {
			_ = c.Legs[i].UnmarshalYAML(n)
		}
	}
	if routes := items("routes", "routes"); len(routes) > 0 {
		c.Routes = make([]Route, len(routes))
		for i, n := range routes {
			_ = c.Routes[i].UnmarshalYAML(n)
		}
	}
	if groups := items("groups", "groups"); len(groups) > 0 {
		c.Groups = make([]Group, len(groups))
		for i, n := range groups {
			_ = c.Groups[i].UnmarshalYAML(n)
		}
	}
	if n := vals["admin"]; n != nil && !isNull(n) {
		_ = c.Admin.UnmarshalYAML(n)
	}
	if n := vals["pool"]; n != nil && !isNull(n) {
		_ = c.Pool.UnmarshalYAML(n)
	}
	c.errs = errs
}

// mapping checks that n is a mapping whose keys are all in allowed, and
// returns the value node of each key; what names it in errors ("": the
// file's top level).
func mapping(n *yaml.Node, what string, allowed ...string) (map[string]*yaml.Node, []lineError) {
	if what != "" {
		what += ": "
	}
	if n.Kind != yaml.MappingNode {
		return nil, []lineError{{n.Line, fmt.Sprintf("%swant a mapping of keys (%s), got %s", what, strings.Join(allowed, ", "), describe(n))}}
	}
	vals := map[string]*yaml.Node{}
	var errs []lineError
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		known := false
		for _, a := range allowed {
			known = known || k.Value == a
		}
		switch {
		case !known:
			errs = append(errs, lineError{k.Line, fmt.Sprintf("%sunknown key %q (known: %s)", what, k.Value, strings.Join(allowed, ", "))})
		case vals[k.Value] != nil:
			errs = append(errs, lineError{k.Line, fmt.Sprintf("%skey %q given twice", what, k.Value)})
		default:
			vals[k.Value] = v
		}
	}
	return vals, errs
}

// lineError is a problem found while decoding, kept for validate.
type lineError struct {
	line int
	msg  string
}

// keyLines are the lines of a mapping's keys, so that what is wrong with
// a key is reported at its own line, not the mapping's first.
type keyLines map[string]int

// linesOf returns the lines of the keys of n (a mapping).
func linesOf(n *yaml.Node) keyLines {
	k := keyLines{}
	if n.Kind != yaml.MappingNode {
		return k
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if _, seen := k[n.Content[i].Value]; !seen {
			k[n.Content[i].Value] = n.Content[i].Line
		}
	}
	return k
}

// at is the line of the first of keys the mapping gives, or def when it
// gives none of them.
func (k keyLines) at(def int, keys ...string) int {
	for _, key := range keys {
		if line := k[key]; line != 0 {
			return line
		}
	}
	return def
}

// prefix is what, as it begins a message ("" for none).
func prefix(what string) string {
	if what == "" {
		return ""
	}
	return what + ": "
}

// scalar decodes a scalar value into v (a *string, *int or *bool), noting
// a failure in the file's terms. An int takes a whole number only: YAML's
// decoder would cut 1024.9 to 1024.
func scalar(vals map[string]*yaml.Node, key, what string, v any, errs *[]lineError) {
	n := vals[key]
	if n == nil {
		return
	}
	if n.Kind != yaml.ScalarNode {
		*errs = append(*errs, lineError{n.Line, fmt.Sprintf("%s%s: want a single value, got %s", prefix(what), key, describe(n))})
		return
	}
	if _, ok := v.(*int); ok && !isNull(n) && n.ShortTag() != "!!int" {
		*errs = append(*errs, lineError{n.Line, fmt.Sprintf("%s%s %q: want a whole number", prefix(what), key, n.Value)})
		return
	}
	if err := n.Decode(v); err != nil {
		want := "want a single value"
		switch v.(type) {
		case *int:
			want = "want a whole number"
		case *bool:
			want = "want true or false"
		}
		*errs = append(*errs, lineError{n.Line, fmt.Sprintf("%s%s %q: %s", prefix(what), key, n.Value, want)})
	}
}

// What parsed's parsers want, said in the file's terms (their own errors
// name Go functions).
const (
	wantAddr     = "not an IP address"
	wantAddrPort = `want an IP address and a port, as "198.18.1.2:4420"`
	wantPrefix   = `want a prefix, as "239.0.0.0/8"`
	wantDuration = "want a duration with a unit, as 500ms, 3s or 1m"
)

// parsed decodes a scalar with parse (netip's parsers, time's), noting a
// failure as want says it; the line is its value's, 0 when the key is not
// given or its value does not parse.
func parsed[T any](vals map[string]*yaml.Node, key, what string, parse func(string) (T, error), want string, errs *[]lineError) (T, int) {
	var zero T
	var text string
	scalar(vals, key, what, &text, errs)
	if text == "" {
		return zero, 0
	}
	v, err := parse(text)
	if err != nil {
		*errs = append(*errs, lineError{vals[key].Line, fmt.Sprintf("%s%s %q: %s", prefix(what), key, text, want)})
		return zero, 0
	}
	return v, vals[key].Line
}

// NoUDPOffload says the file turned the leg's UDP offloads off
// (udp_offload: false).
func (l *Leg) NoUDPOffload() bool { return l.UDPOffload != nil && !*l.UDPOffload }

// UnmarshalYAML decodes a leg from its node.
func (l *Leg) UnmarshalYAML(n *yaml.Node) error {
	l.line, l.keys = n.Line, linesOf(n)
	// What is wrong is named with the leg in validate.
	vals, errs := mapping(n, "", "name", "kind", "ip", "device", "port", "interface", "io", "netns", "ecn",
		"listen", "peer", "cert", "key", "ca", "peer_name", "over", "mtu", "receives", "receive_size", "udp_offload", "freebind",
		"busy_poll", "busy_poll_cpus", "busy_poll_idle", "queues")
	l.notMapping = vals == nil
	for _, k := range []struct {
		key string
		dst *string
	}{{"name", &l.Name}, {"kind", &l.Kind}, {"device", &l.Device}, {"interface", &l.Interface}, {"io", &l.IO}, {"netns", &l.Netns},
		{"listen", &l.Listen}, {"peer", &l.Peer}, {"cert", &l.Cert}, {"key", &l.Key}, {"ca", &l.CA}, {"peer_name", &l.PeerName}, {"over", &l.Over}} {
		scalar(vals, k.key, "", k.dst, &errs)
	}
	scalar(vals, "port", "", &l.Port, &errs)
	scalar(vals, "mtu", "", &l.MTU, &errs)
	scalar(vals, "receives", "", &l.Receives, &errs)
	scalar(vals, "receive_size", "", &l.ReceiveSize, &errs)
	scalar(vals, "ecn", "", &l.ECN, &errs)
	scalar(vals, "freebind", "", &l.FreeBind, &errs)
	scalar(vals, "busy_poll", "", &l.BusyPoll, &errs)
	scalar(vals, "queues", "", &l.Queues, &errs)
	l.BusyPollCPUs = cpuList(vals, &errs)
	l.BusyPollIdle = busyPollIdle(vals, &errs)
	if _, ok := vals["udp_offload"]; ok {
		offload := true
		scalar(vals, "udp_offload", "", &offload, &errs)
		l.UDPOffload = &offload
	}
	l.IP, _ = parsed(vals, "ip", "", netip.ParseAddr, wantAddr, &errs)
	l.errs = errs
	return nil
}

// UnmarshalYAML decodes the admin server's settings from their node.
func (a *Admin) UnmarshalYAML(n *yaml.Node) error {
	a.line = n.Line
	vals, errs := mapping(n, "admin", "listen", "control", "hosts")
	if v := vals["listen"]; v != nil {
		a.given = true
		a.line = v.Line
		scalar(vals, "listen", "admin", &a.Listen, &errs)
	}
	if v := vals["control"]; v != nil {
		a.controlLine = v.Line
		scalar(vals, "control", "admin", &a.Control, &errs)
	}
	if v := vals["hosts"]; v != nil && !isNull(v) {
		if v.Kind != yaml.SequenceNode {
			errs = append(errs, lineError{v.Line, "admin: hosts: want a list of host names, as [\"gw1.example.com\"], got " + describe(v)})
		}
		for _, item := range v.Content {
			name := strings.TrimSuffix(strings.ToLower(item.Value), ".")
			if item.Kind != yaml.ScalarNode || !hostPattern.MatchString(name) {
				errs = append(errs, lineError{item.Line, fmt.Sprintf("admin: hosts %q: want a host name, as \"gw1.example.com\" (letters, digits, '-' and '.')", item.Value)})
				continue
			}
			a.Hosts = append(a.Hosts, name)
		}
	}
	a.errs = errs
	return nil
}

// Pool is the gateway's memory pool: the buffers every request crosses
// in, registered with each verbs leg's protection domain and as each
// AF_XDP leg's UMEM, so pinned once per such leg (rbridge doctor checks
// the memlock limit for it).
type Pool struct {
	// Size is the pool's bytes (0: the gateway's default, 128 MiB). A
	// request that finds the pool empty waits for a buffer (an RNR NAK,
	// or held and asked for again): a larger pool keeps more in flight.
	Size int64 `yaml:"size"`

	errs []lineError
}

// MinPoolSize and MaxPoolSize bound pool.size: below 16 MiB a pool that
// stages holds two of its largest buffers, and an AF_XDP leg's rings would
// take most of its frames.
const (
	MinPoolSize = 16 << 20
	MaxPoolSize = 64 << 30
)

// UnmarshalYAML decodes the pool's settings from their node.
func (p *Pool) UnmarshalYAML(n *yaml.Node) error {
	vals, errs := mapping(n, "pool", "size")
	if v := vals["size"]; v != nil && v.Kind != yaml.ScalarNode {
		errs = append(errs, lineError{v.Line, "pool: size: want a byte count, as 512MiB, got " + describe(v)})
	} else if v != nil {
		x, err := parseBytes(v.Value)
		switch {
		case err != nil:
			var bits bitsError
			if errors.As(err, &bits) {
				err = fmt.Errorf("unit %q: bits? the size is in bytes: write MiB for mebibytes", string(bits))
			}
			errs = append(errs, lineError{v.Line, fmt.Sprintf("pool: size %q: %v", v.Value, err)})
		case x < MinPoolSize || x > MaxPoolSize:
			errs = append(errs, lineError{v.Line, fmt.Sprintf("pool: size %q: want 16MiB to 64GiB", v.Value)})
		default:
			p.Size = x
		}
	}
	p.errs = errs
	return nil
}

// check reports what decoding the pool's settings found wrong.
func (p *Pool) check(bad func(int, string, ...any)) {
	for _, e := range p.errs {
		bad(e.line, "%s", e.msg)
	}
}

// hostPattern is a DNS host name: labels of letters, digits and '-', not
// beginning or ending with '-', joined by dots.
var hostPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// UnmarshalYAML decodes an endpoint (listen, target) from its node.
func (e *Endpoint) UnmarshalYAML(n *yaml.Node) error {
	e.decode(n, "endpoint")
	return nil
}

// decode decodes an endpoint from its node; key is the route's key that
// holds it (listen, target), for errors.
func (e *Endpoint) decode(n *yaml.Node, key string) {
	e.line = n.Line
	vals, errs := mapping(n, key, "leg", "addr")
	scalar(vals, "leg", key, &e.Leg, &errs)
	e.Addr, _ = parsed(vals, "addr", key, netip.ParseAddrPort, wantAddrPort, &errs)
	e.errs = errs
}

// UnmarshalYAML decodes a route from its node.
func (r *Route) UnmarshalYAML(n *yaml.Node) error {
	r.line, r.keys = n.Line, linesOf(n)
	// What is wrong is named with the route in validate.
	vals, errs := mapping(n, "", "name", "listen", "target", "allow", "fallback", "ud", "rate", "protocol", "liveness")
	r.notMapping = vals == nil
	scalar(vals, "name", "", &r.Name, &errs)
	r.Liveness = DefaultLiveness
	if d, line := parsed(vals, "liveness", "", time.ParseDuration, wantDuration, &errs); line != 0 {
		r.livenessLine = line
		switch {
		case d == 0:
			r.Liveness = LivenessOff
		case d < minLiveness || d > maxLiveness:
			errs = append(errs, lineError{line, fmt.Sprintf("liveness %v: want 0s (off) or a duration from %v to %v", vals["liveness"].Value, minLiveness, maxLiveness)})
		default:
			r.Liveness = d
		}
	}
	if v := vals["protocol"]; v != nil {
		n := len(errs)
		if scalar(vals, "protocol", "", &r.Protocol, &errs); len(errs) == n {
			r.protocolLine = v.Line
		}
	}
	if v := vals["rate"]; v != nil {
		r.rateLine = v.Line
		r.rateErrs = decodeRate(v, &r.Rate)
	}
	if v := vals["ud"]; v != nil {
		if err := v.Decode(&r.UD); err != nil {
			errs = append(errs, lineError{v.Line, fmt.Sprintf("ud %q: want true or false", v.Value)})
		}
	}
	for key, e := range map[string]*Endpoint{"listen": &r.Listen, "target": &r.Target} {
		if v := vals[key]; v != nil {
			e.decode(v, key)
		}
	}
	if v := vals["fallback"]; v != nil {
		_ = r.Fallback.UnmarshalYAML(v)
	}
	if v := vals["allow"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			errs = append(errs, lineError{v.Line, "allow: want a list of prefixes, as [\"198.18.3.0/24\"], got " + describe(v)})
		}
		for _, item := range v.Content {
			p, err := netip.ParsePrefix(item.Value)
			if err != nil {
				if a, aerr := netip.ParseAddr(item.Value); aerr == nil {
					p, err = a.Prefix(a.BitLen()) // a single address
				}
			}
			if err != nil {
				errs = append(errs, lineError{item.Line, fmt.Sprintf("allow %q: not an address or prefix, as \"198.18.3.0/24\" or \"198.18.3.7\"", item.Value)})
				continue
			}
			r.Allow = append(r.Allow, p.Masked())
		}
	}
	r.errs = errs
	return nil
}

// owner begins a message about what a leg, a route or a group holds: its
// kind and its name ("route \"storage\": "), or the kind alone for one
// without a name (which is an error of its own).
func owner(kind, name string) string {
	if name == "" {
		return kind + ": "
	}
	return fmt.Sprintf("%s %q: ", kind, name)
}

// listenKey is a listen address in one of rdma_cm's port spaces (UD or
// not): an RC and a UD route may listen on the same address and port.
type listenKey struct {
	addr netip.AddrPort
	ud   bool
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (c *Config) validate() Errors {
	var es Errors
	bad := func(line int, format string, args ...any) {
		es = append(es, &Error{File: c.file, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
	keep := func(errs []lineError) {
		for _, e := range errs {
			bad(e.line, "%s", e.msg)
		}
	}
	keep(c.errs)
	// A list that is not one was named above.
	if len(c.Legs) == 0 && !c.notList["legs"] {
		bad(0, "no legs: a gateway needs one on each fabric")
	}
	if len(c.Routes) == 0 && len(c.Groups) == 0 && !c.notList["routes"] && !c.notList["groups"] {
		bad(0, "no routes: nothing would cross the gateway")
	}
	seen := map[string]int{}
	for i := range c.Legs {
		l := &c.Legs[i]
		at := func(keys ...string) int { return l.keys.at(l.line, keys...) }
		for _, e := range l.errs {
			bad(e.line, "%s%s", owner("leg", l.Name), e.msg)
		}
		if l.notMapping {
			continue
		}
		switch {
		case l.Name == "":
			bad(l.line, "leg without a name")
		case !namePattern.MatchString(l.Name):
			bad(at("name"), "leg name %q: letters, digits, '.', '_' and '-' only", l.Name)
		case seen[l.Name] != 0:
			bad(at("name"), "leg %q is defined twice (first at line %d)", l.Name, seen[l.Name])
		default:
			seen[l.Name] = at("name")
		}
		if !l.IP.IsValid() && len(l.errs) == 0 {
			bad(l.line, "leg %q: no ip: the gateway's address on this fabric", l.Name)
		} else if l.IP.IsUnspecified() || l.IP.IsMulticast() {
			bad(at("ip"), "leg %q: ip %v is not an address the gateway can have", l.Name, l.IP)
		}
		l.IP = l.IP.Unmap()
		if l.Kind != KindQUIC && (l.Listen != "" || l.Peer != "" || l.Cert != "" || l.Key != "" || l.CA != "" || l.PeerName != "" || l.Over != "") {
			bad(at("listen", "peer", "cert", "key", "ca", "peer_name", "over"), "leg %q: listen, peer, cert, key, ca, peer_name and over are for quic legs", l.Name)
		}
		if l.MTU != 0 && l.Kind != KindUserspace {
			bad(at("mtu"), "leg %q: mtu is for userspace legs (a verbs leg's is its port's)", l.Name)
		}
		if l.FreeBind && l.Kind != KindUserspace {
			bad(at("freebind"), "leg %q: freebind is for userspace legs with io: udp", l.Name)
		}
		if l.keys["udp_offload"] != 0 && l.Kind != KindUserspace {
			bad(at("udp_offload"), "leg %q: udp_offload is for userspace legs with io: udp", l.Name)
		}
		if (l.Receives != 0 || l.ReceiveSize != 0) && l.Kind != KindVerbs {
			bad(at("receives", "receive_size"), "leg %q: receives and receive_size are for verbs legs (a userspace leg's receives are its pool's)", l.Name)
		}
		if l.Receives < 0 || l.Receives > MaxReceives {
			bad(at("receives"), "leg %q: receives %d: want 1 to %d", l.Name, l.Receives, MaxReceives)
		}
		if n := l.ReceiveSize; n != 0 && (n < 256 || n > 65536 || n&(n-1) != 0) {
			bad(at("receive_size"), "leg %q: receive_size %d: want a power of two from 256 to 65536 bytes", l.Name, n)
		}
		switch l.Kind {
		case KindQUIC:
			if l.Interface != "" || l.IO != "" || l.Netns != "" || l.Device != "" || l.Port != 0 {
				bad(at("interface", "io", "netns", "device", "port"), "leg %q: interface, io, netns, device and port are not for quic legs (listen and peer say where)", l.Name)
			}
			if l.ECN {
				bad(at("ecn"), "leg %q: ecn is for userspace legs; a quic leg's congestion control is QUIC's", l.Name)
			}
			c.validateQUIC(l, bad)
		case KindVerbs:
			if l.Interface != "" || l.IO != "" || l.Netns != "" {
				bad(at("interface", "io", "netns"), "leg %q: interface, io and netns are for userspace legs; a verbs leg is found by its ip (or device)", l.Name)
			}
			if l.ECN {
				bad(at("ecn"), "leg %q: ecn is for userspace legs; a verbs leg's NIC runs its own congestion control", l.Name)
			}
			if l.Port < 0 || l.Port > 255 {
				bad(at("port"), "leg %q: port %d: want 1 to 255", l.Name, l.Port)
			}
		case KindUserspace:
			if l.Interface == "" {
				bad(l.line, "leg %q: a userspace leg needs the interface it runs on", l.Name)
			}
			if l.NoUDPOffload() && l.IO != IOUDP {
				bad(at("udp_offload"), "leg %q: udp_offload is for io: udp (an io: afxdp leg's packets bypass the kernel's UDP)", l.Name)
			}
			if l.FreeBind && l.IO != IOUDP {
				bad(at("freebind"), "leg %q: freebind is for io: udp for now (an io: afxdp leg on a floating address is not supported yet)", l.Name)
			}
			if l.Device != "" || l.Port != 0 {
				bad(at("device", "port"), "leg %q: device and port are for verbs legs", l.Name)
			}
			switch l.MTU {
			case 0, 256, 512, 1024, 2048, 4096:
			default:
				bad(at("mtu"), "leg %q: mtu %d: want an IB MTU (256, 512, 1024, 2048 or 4096)", l.Name, l.MTU)
			}
			switch l.IO {
			case "":
				l.IO = IOAFXDP
			case IOAFXDP, IOUDP:
			default:
				bad(at("io"), "leg %q: io %q: want afxdp or udp", l.Name, l.IO)
			}
		case "":
			bad(l.line, "leg %q: no kind: want verbs, userspace or quic", l.Name)
		default:
			bad(at("kind"), "leg %q: kind %q: want verbs, userspace or quic", l.Name, l.Kind)
		}
		validateLegBusyPoll(l, bad)
		validateQueues(l, bad)
	}
	routes := map[string]int{}
	listens := map[listenKey]string{}
	for i := range c.Routes {
		r := &c.Routes[i]
		at := func(keys ...string) int { return r.keys.at(r.line, keys...) }
		for _, errs := range [][]lineError{r.errs, r.Listen.errs, r.Target.errs, r.Fallback.errs, r.rateErrs} {
			for _, e := range errs {
				bad(e.line, "%s%s", owner("route", r.Name), e.msg)
			}
		}
		if r.notMapping {
			continue
		}
		if r.rateLine != 0 && !r.UD {
			bad(r.rateLine, "route %q: rate: a rate limit is for UD routes (ud: true); an RC route's pace is its transport's flow control, which drops nothing", r.Name)
		}
		switch {
		case r.Name == "":
			bad(r.line, "route without a name")
		case !namePattern.MatchString(r.Name):
			bad(at("name"), "route name %q: letters, digits, '.', '_' and '-' only", r.Name)
		case routes[r.Name] != 0:
			bad(at("name"), "route %q is defined twice (first at line %d)", r.Name, routes[r.Name])
		default:
			routes[r.Name] = at("name")
		}
		var ends [2]*Leg
		for j, e := range []*Endpoint{&r.Listen, &r.Target} {
			what := [2]string{"listen", "target"}[j]
			line := e.line
			if line == 0 {
				line = r.line // not given
			}
			if e.Leg == "" {
				bad(line, "route %q: %s has no leg", r.Name, what)
				continue
			}
			l, ok := c.Leg(e.Leg)
			if !ok {
				if !c.notList["legs"] { // else no leg could be read
					bad(line, "route %q: %s leg %q does not exist", r.Name, what, e.Leg)
				}
				continue
			}
			ends[j] = l
			if len(e.errs) > 0 {
				continue
			}
			switch {
			case !e.Addr.IsValid():
				bad(line, "route %q: %s has no addr: %s", r.Name, what, wantAddrPort)
				continue
			case e.Addr.Port() == 0:
				bad(line, "route %q: %s addr %v: port 0: %s", r.Name, what, e.Addr, wantAddrPort)
				continue
			}
			e.Addr = netip.AddrPortFrom(e.Addr.Addr().Unmap(), e.Addr.Port())
			if e.Addr.Addr().Is4() != l.IP.Is4() && l.IP.IsValid() && l.Kind != KindQUIC {
				bad(line, "route %q: %s addr %v is not of leg %q's address family (%v)", r.Name, what, e.Addr, l.Name, l.IP)
			}
		}
		if ends[0] != nil && r.Listen.Addr.IsValid() {
			if r.Listen.Addr.Addr() != ends[0].IP && ends[0].Kind != KindQUIC && ends[0].IP.IsValid() {
				bad(r.Listen.line, "route %q: listen addr %v is not leg %q's address (%v)", r.Name, r.Listen.Addr, ends[0].Name, ends[0].IP)
			} else if other, dup := listens[listenKey{r.Listen.Addr, r.UD}]; dup {
				bad(r.Listen.line, "route %q: listen addr %v is route %q's already", r.Name, r.Listen.Addr, other)
			} else {
				listens[listenKey{r.Listen.Addr, r.UD}] = r.Name
			}
		}
		if ends[0] != nil && ends[0] == ends[1] {
			bad(r.Target.line, "route %q: listen and target are both on leg %q: a route crosses from one leg to the other", r.Name, ends[0].Name)
		}
		if r.Fallback.line != 0 && len(r.Fallback.errs) == 0 {
			c.validateFallback(r, ends[0], bad)
		}
		if r.UD {
			for _, l := range ends {
				if l != nil && l.Kind == KindQUIC {
					bad(at("ud"), "route %q: ud: leg %q is a quic leg; UD routes are on userspace and verbs legs", r.Name, l.Name)
				}
			}
			if r.Fallback.line != 0 {
				bad(r.Fallback.line, "route %q: ud: a UD route has no fallback", r.Name)
			}
		}
		if r.protocolLine != 0 {
			r.checkProtocol(bad)
		}
		r.checkLiveness(bad)
		if ends[1] != nil && r.Target.Addr.IsValid() && r.Target.Addr.Addr() == ends[1].IP && ends[1].Kind != KindQUIC {
			bad(r.Target.line, "route %q: target addr %v is the gateway's own address on leg %q", r.Name, r.Target.Addr, ends[1].Name)
		}
	}
	c.validateGroups(bad)
	c.Admin.check(bad)
	c.Pool.check(bad)
	// In the file's order, as a reader goes through it (those of no line,
	// the file's as a whole, first).
	slices.SortStableFunc(es, func(a, b *Error) int { return a.Line - b.Line })
	return es
}

// checkLiveness checks that a route given a liveness has connections.
func (r *Route) checkLiveness(bad func(int, string, ...any)) {
	if r.UD && r.livenessLine != 0 {
		bad(r.livenessLine, "route %q: liveness: a UD route has no connections to probe", r.Name)
	}
}

// checkProtocol checks a route's protocol: one this gateway understands,
// on an RC route.
func (r *Route) checkProtocol(bad func(int, string, ...any)) {
	known := strings.Join(Protocols, ", ")
	switch {
	case slices.Contains(Protocols, r.Protocol):
		if r.UD {
			bad(r.protocolLine, "route %q: protocol %s: a protocol is for RC routes; a UD route's datagrams are relayed as they are", r.Name, r.Protocol)
		}
	case r.Protocol == "":
		bad(r.protocolLine, "route %q: protocol is empty: want one of %s (or no protocol key: messages relayed as they are)", r.Name, known)
	case unservedProtocols[strings.ToLower(r.Protocol)] != "":
		bad(r.protocolLine, "route %q: protocol %q: %s; known: %s", r.Name, r.Protocol, unservedProtocols[strings.ToLower(r.Protocol)], known)
	default:
		bad(r.protocolLine, "route %q: protocol %q is not one rbridge understands; known: %s", r.Name, r.Protocol, known)
	}
}

// check checks the admin server's settings and sets its defaults and
// parsed address.
func (a *Admin) check(bad func(int, string, ...any)) {
	for _, e := range a.errs {
		bad(e.line, "%s", e.msg)
	}
	if !a.given && len(a.errs) == 0 {
		a.Listen = DefaultAdminListen
	}
	if a.Listen != "" {
		ap, err := netip.ParseAddrPort(a.Listen)
		if err != nil {
			bad(a.line, "admin: listen %q: want an IP address and a port, as %q, or \"\" for no admin server", a.Listen, DefaultAdminListen)
		} else {
			a.listen = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
	}
	switch {
	case a.controlLine == 0:
		a.Control = DefaultControl()
	case a.Control == "":
	case !filepath.IsAbs(a.Control):
		bad(a.controlLine, "admin: control %q: want an absolute path, as %q, or \"\" for no control socket", a.Control, DefaultAdminControl)
	case strings.HasSuffix(a.Control, "/"):
		bad(a.controlLine, "admin: control %q: want the socket's path, not a directory's, as %q", a.Control, DefaultAdminControl)
	case len(a.Control) > maxSocketPath:
		bad(a.controlLine, "admin: control %q: %d bytes long, above the %d a unix socket's path may have", a.Control, len(a.Control), maxSocketPath)
	default:
		a.Control = filepath.Clean(a.Control)
	}
}

// MinBusyPollIdle and MaxBusyPollIdle bound a leg's or a group's busy_poll_idle: a
// spell shorter than a few naps would have the loop nap between the
// packets of one exchange, and a longer one than a minute is all but
// never napping.
const (
	MinBusyPollIdle = 100 * time.Microsecond
	MaxBusyPollIdle = time.Minute
)

// MaxCPU bounds a CPU number in busy_poll_cpus (the kernel's CPU_SETSIZE
// in glibc and golang.org/x/sys/unix's CPUSet).
const MaxCPU = 1024

// cpuList decodes busy_poll_cpus (nil when not given).
func cpuList(vals map[string]*yaml.Node, errs *[]lineError) []int {
	v := vals["busy_poll_cpus"]
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		*errs = append(*errs, lineError{v.Line, "busy_poll_cpus: want a list of CPU numbers, as [2, 3], got " + describe(v)})
	}
	var cpus []int
	for _, item := range v.Content {
		cpu, err := strconv.Atoi(item.Value)
		if err != nil || item.Kind != yaml.ScalarNode {
			*errs = append(*errs, lineError{item.Line, fmt.Sprintf("busy_poll_cpus %q: not a CPU number", item.Value)})
			continue
		}
		cpus = append(cpus, cpu)
	}
	return cpus
}

// validateCPUs checks busy_poll_cpus' numbers (what names them: `group
// "ticks"`, `leg "a"`).
func validateCPUs(what string, cpus []int, line int, bad func(int, string, ...any)) {
	seen := map[int]bool{}
	for _, cpu := range cpus {
		switch {
		case cpu < 0 || cpu >= MaxCPU:
			bad(line, "%s: busy_poll_cpus: CPU %d: want 0 to %d", what, cpu, MaxCPU-1)
		case seen[cpu]:
			bad(line, "%s: busy_poll_cpus: CPU %d given twice", what, cpu)
		}
		seen[cpu] = true
	}
}

// busyPollIdle is a leg's or a group's busy_poll_idle (0 when absent or
// bad: bad is an error in errs).
func busyPollIdle(vals map[string]*yaml.Node, errs *[]lineError) time.Duration {
	d, line := parsed(vals, "busy_poll_idle", "", time.ParseDuration, wantDuration, errs)
	if line != 0 && d != 0 && (d < MinBusyPollIdle || d > MaxBusyPollIdle) {
		*errs = append(*errs, lineError{line, fmt.Sprintf("busy_poll_idle %v: want 0s (never nap) or a duration from %v to %v", vals["busy_poll_idle"].Value, MinBusyPollIdle, MaxBusyPollIdle)})
		return 0
	}
	return d
}

// validateLegBusyPoll checks a leg's busy_poll and busy_poll_cpus (its
// kind and io are checked).
func validateLegBusyPoll(l *Leg, bad func(int, string, ...any)) {
	line := l.keys.at(l.line, "busy_poll_cpus")
	switch {
	case len(l.BusyPollCPUs) > 0 && !l.BusyPoll:
		bad(line, "leg %q: busy_poll_cpus without busy_poll: true", l.Name)
	case len(l.BusyPollCPUs) > 1:
		bad(line, "leg %q: busy_poll_cpus: %d CPUs for 1 receive loop (a leg has one)", l.Name, len(l.BusyPollCPUs))
	}
	validateCPUs(fmt.Sprintf("leg %q", l.Name), l.BusyPollCPUs, line, bad)
	if l.keys["busy_poll_idle"] != 0 && !l.BusyPoll {
		bad(l.keys.at(l.line, "busy_poll_idle"), "leg %q: busy_poll_idle without busy_poll: true", l.Name)
	}
	if !l.BusyPoll {
		return
	}
	at := l.keys.at(l.line, "busy_poll")
	switch {
	case l.Kind == KindQUIC:
		bad(at, "leg %q: busy_poll is for userspace and verbs legs: a quic leg's packets are quic-go's, read by its own goroutines", l.Name)
	}
}

// validateQueues checks a leg's queues (its kind, io and busy_poll are
// checked).
func validateQueues(l *Leg, bad func(int, string, ...any)) {
	if l.keys["queues"] == 0 {
		return
	}
	at := l.keys.at(l.line, "queues")
	switch {
	case l.Kind != KindUserspace:
		bad(at, "leg %q: queues is for userspace legs", l.Name)
	case l.Queues < 1 || l.Queues > MaxQueues:
		bad(at, "leg %q: queues %d: want 1 to %d receive loops", l.Name, l.Queues, MaxQueues)
	case l.BusyPoll && l.Queues > 1 && l.IO == IOUDP:
		bad(at, "leg %q: queues %d with busy_poll: a busy-polled io: udp leg has one receive loop (queues: 1)", l.Name, l.Queues)
	}
}

// validateBusyPoll checks a group's busy_poll and busy_poll_cpus (its
// direction is checked and defaulted).
func validateBusyPoll(g *Group, bad func(int, string, ...any)) {
	line := g.keys.at(g.line, "busy_poll_cpus")
	if len(g.BusyPollCPUs) > 0 && !g.BusyPoll {
		bad(line, "group %q: busy_poll_cpus without busy_poll: true", g.Name)
	}
	if dirs := map[string]int{DirectionBoth: 2, DirectionRoCEToIB: 1, DirectionIBToRoCE: 1}[g.Direction]; dirs > 0 && len(g.BusyPollCPUs) > dirs {
		bad(line, "group %q: busy_poll_cpus: %d CPUs for %d receive loops (one per direction relayed, %s)", g.Name, len(g.BusyPollCPUs), dirs, g.Direction)
	}
	validateCPUs(fmt.Sprintf("group %q", g.Name), g.BusyPollCPUs, line, bad)
	if g.keys["busy_poll_idle"] != 0 && !g.BusyPoll {
		bad(g.keys.at(g.line, "busy_poll_idle"), "group %q: busy_poll_idle without busy_poll: true", g.Name)
	}
}

// Group directions.
const (
	DirectionBoth     = "both"
	DirectionIBToRoCE = "ib_to_roce"
	DirectionRoCEToIB = "roce_to_ib"
)

// DefaultLoopWindow is a group's loop_window when the file gives none:
// far longer than a copy takes through another gateway on a fabric.
const DefaultLoopWindow = 500 * time.Millisecond

// MGID forms of a group on its ib leg.
const (
	MGIDRDMACM = "rdma_cm"
	MGIDIPoIB  = "ipoib"
)

// Sides of a group with joined_on.
const (
	SideRoCE = "roce"
	SideIB   = "ib"
)

// Limits of max_groups.
const (
	DefaultMaxGroups = 64
	MaxMaxGroups     = 1024
)

// DefaultWithin is a joined_on group's within when the file gives none:
// every IPv4 multicast group (the link-local block 224.0.0.0/24, which no
// router forwards, is never taken).
var DefaultWithin = netip.MustParsePrefix("224.0.0.0/4")

// DefaultWithin6 is the same between IPv6 legs: every IPv6 multicast group
// (found by MLD; the interface- and link-local scopes, ff01:: and ff02::,
// are never taken).
var DefaultWithin6 = netip.MustParsePrefix("ff00::/8")

// Group is an IP multicast group relayed between a RoCE leg and an IB
// leg: joined on both (IGMP on the userspace leg's interface; rdma_cm's
// join on the verbs leg), its UD datagrams sent on the other in the
// direction given. With JoinedOn it is instead every group members join
// on one side.
type Group struct {
	Name string `yaml:"name"`
	// Group is the IP multicast address (none with JoinedOn).
	Group netip.Addr `yaml:"group"`
	// JoinedOn (SideRoCE or SideIB) makes the entry every group a member
	// on that side joins (heard in its IGMP or MLD reports there) within
	// Within, at most MaxGroups at once, each relayed to that side from
	// the other: Direction is roce_to_ib for SideIB, ib_to_roce for
	// SideRoCE.
	JoinedOn  string       `yaml:"joined_on"`
	Within    netip.Prefix `yaml:"within"`
	MaxGroups int          `yaml:"max_groups"`
	// RoCE names the userspace leg (io: udp or afxdp) and IB the other
	// one (a verbs leg, or a userspace one).
	RoCE string `yaml:"roce"`
	IB   string `yaml:"ib"`
	// Direction is both (default), ib_to_roce or roce_to_ib; the side that
	// only sends joins send-only where it can.
	Direction string `yaml:"direction"`
	// MGID is the group's MGID form on the IB leg, when that is a verbs
	// leg on an InfiniBand port: rdma_cm (default: the RDMA-CM form
	// rdma_join_multicast computes) or ipoib (the group IPoIB joins, with
	// the Q_Key of the port's IPoIB broadcast group: joined in rdma_cm's
	// IPoIB port space, which the kernel refuses on RoCE ports). On a
	// RoCE port the MGID is the group's IP mapping whatever the form.
	MGID string `yaml:"mgid"`
	// Rate limits the datagrams the group relays, in each direction on
	// its own; the zero Rate has no limit.
	Rate Rate `yaml:"rate"`
	// BusyPoll makes each of the group's receive loops (one per direction
	// relayed) spin on its QP's completion queue instead of sleeping
	// until a completion wakes it, on an OS thread of its own that it
	// never yields: on a verbs leg it polls the HCA's CQ (which then has
	// no completion channel); on a userspace leg it reads the group's
	// socket (io: udp; SO_BUSY_POLL set) or, on AF_XDP, the group's queue
	// that the leg's socket fills, without waiting, and polls the QP's
	// CQ, in the one loop. The lowest latency, for a CPU kept busy by each loop
	// while the gateway runs, traffic or not.
	BusyPoll bool `yaml:"busy_poll"`
	// BusyPollCPUs (with BusyPoll) pins the receive loops' threads to
	// these CPUs: the first roce_to_ib's, the next ib_to_roce's (of the
	// directions relayed). Isolate them from the rest of the machine.
	BusyPollCPUs []int `yaml:"busy_poll_cpus"`
	// BusyPollIdle (with BusyPoll) has each receive loop nap once it has
	// found no datagram for that long, as a leg's busy_poll_idle does: a
	// sleep between polls from 50 us doubling to 1 ms, the CPU given back
	// until the next datagram, which waits up to a nap. 0: never.
	BusyPollIdle time.Duration `yaml:"busy_poll_idle"`
	// Peers are the addresses, on either leg, of other gateways that
	// relay this group between the same fabrics: what they send to the
	// group (their copies) is never relayed. Optional: without it a copy
	// of what this gateway relayed, come back through another gateway, is
	// dropped by its bytes (loop prevention within a short window); with
	// it, from the first datagram, whichever copy arrives first, and with
	// no false positive.
	Peers []netip.Addr `yaml:"peers"`
	// LoopWindow is how long the group remembers what it relayed: within
	// it the same payload and immediate data from another source, or on
	// the other side, is a copy come round through another gateway and
	// is dropped (DefaultLoopWindow when absent; 0 turns this off, for a
	// group whose members send identical datagrams and that one gateway
	// relays, or whose other gateways are all in Peers).
	LoopWindow time.Duration `yaml:"loop_window"`

	line       int
	keys       keyLines
	notMapping bool            // said in errs; nothing more to say
	errs       []lineError     // what is wrong, named with the group in validateGroups
	rateErrs   []lineError     // named with the group in validateGroups
	setKeys    map[string]bool // the keys the file gave
}

// Rate is a limit on a group's or a UD route's datagrams, per direction:
// a token bucket of each kind given, refilled at the rate and holding at
// most its burst.
// A datagram crosses only when both buckets hold enough for it; else it is
// dropped (UD: nothing is resent) and counted. Zero fields have no limit.
type Rate struct {
	// Packets is the datagrams a second; BurstPackets the most that
	// cross at once after a quiet spell (default a tenth of Packets, at
	// least 1).
	Packets      int64 `yaml:"packets" json:"packets,omitempty"`
	BurstPackets int64 `yaml:"burst_packets" json:"burst_packets,omitempty"`
	// Bytes is the payload bytes a second; BurstBytes the most at once
	// (default a tenth of Bytes, at least MaxDatagram). In the file both
	// take a unit: 50MB, 1.5GB (1000s) or 64KiB, 1MiB (1024s); a plain
	// number is bytes.
	Bytes      int64 `yaml:"bytes" json:"bytes,omitempty"`
	BurstBytes int64 `yaml:"burst_bytes" json:"burst_bytes,omitempty"`
}

// Limited reports whether r limits anything.
func (r Rate) Limited() bool { return r.Packets > 0 || r.Bytes > 0 }

// String describes the limit, each way: "10 datagrams/s (burst 2), 1000000
// bytes/s (burst 100000)", or "none".
func (r Rate) String() string {
	if !r.Limited() {
		return "none"
	}
	var s []string
	if r.Packets > 0 {
		s = append(s, fmt.Sprintf("%d datagrams/s (burst %d)", r.Packets, r.BurstPackets))
	}
	if r.Bytes > 0 {
		s = append(s, fmt.Sprintf("%d bytes/s (burst %d)", r.Bytes, r.BurstBytes))
	}
	return strings.Join(s, ", ")
}

// MaxDatagram is the longest datagram a group or a UD route relays (the
// largest IB MTU): a byte burst below it would let no such datagram cross.
const MaxDatagram = 4096

// byteSize parses a size in bytes with an optional unit.
var byteSize = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?) ?([A-Za-z]*)$`)

// byteUnits are the units of a byte count (bits are refused: a rate in
// Mbit/s is easy to mistake for MB/s).
var byteUnits = map[string]float64{"": 1, "B": 1, "k": 1e3, "K": 1e3, "kB": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
	"Ki": 1 << 10, "KiB": 1 << 10, "Mi": 1 << 20, "MiB": 1 << 20, "Gi": 1 << 30, "GiB": 1 << 30}

// bitsError is a byte count given in bits: its message is a rate's, whose
// bits are the likely mistake; a size says its own (Pool).
type bitsError string

func (u bitsError) Error() string {
	return fmt.Sprintf("unit %q: bits? the rate is in bytes: write MB for megabytes (50 Mbit/s is 6.25MB)", string(u))
}

// parseBytes parses a byte count: a whole number, or a number with a unit
// (50MB, 1.5GB, 64KiB).
func parseBytes(text string) (int64, error) {
	m := byteSize.FindStringSubmatch(strings.TrimSpace(text))
	if m == nil {
		if strings.HasPrefix(strings.TrimSpace(text), "-") {
			return 0, errors.New("negative")
		}
		return 0, errors.New("want a number of bytes, as 50MB, 1.5GB or 64KiB (k, M, G: 1000s; Ki, Mi, Gi: 1024s)")
	}
	unit, ok := byteUnits[m[2]]
	if !ok {
		if strings.HasSuffix(m[2], "b") || strings.HasSuffix(strings.ToLower(m[2]), "bit") || strings.HasSuffix(m[2], "bps") {
			return 0, bitsError(m[2])
		}
		return 0, fmt.Errorf("unit %q: want B, kB, MB, GB (1000s) or KiB, MiB, GiB (1024s)", m[2])
	}
	var v float64
	fmt.Sscan(m[1], &v)
	v *= unit
	if v >= 1<<62 {
		return 0, errors.New("too large")
	}
	if v != float64(int64(v)) {
		return 0, errors.New("not a whole number of bytes")
	}
	return int64(v), nil
}

// decodeRate decodes a rate limit (a group's or a UD route's) from its
// node into r; what is wrong is returned for validate, which names the
// group or the route.
func decodeRate(n *yaml.Node, r *Rate) []lineError {
	vals, errs := mapping(n, "rate", "packets", "burst_packets", "bytes", "burst_bytes")
	for _, k := range []struct {
		key   string
		dst   *int64
		bytes bool
	}{{"packets", &r.Packets, false}, {"burst_packets", &r.BurstPackets, false}, {"bytes", &r.Bytes, true}, {"burst_bytes", &r.BurstBytes, true}} {
		v := vals[k.key]
		if v == nil {
			continue
		}
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, lineError{v.Line, fmt.Sprintf("rate: %s: want a single value", k.key)})
			continue
		}
		var x int64
		var err error
		if k.bytes {
			x, err = parseBytes(v.Value)
		} else if x, err = strconv.ParseInt(v.Value, 10, 64); err != nil {
			err = errors.New("want a whole number of datagrams")
		}
		switch {
		case err != nil:
			errs = append(errs, lineError{v.Line, fmt.Sprintf("rate: %s %q: %v", k.key, v.Value, err)})
		case x < 0:
			errs = append(errs, lineError{v.Line, fmt.Sprintf("rate: %s %q: negative", k.key, v.Value)})
		case x == 0:
			errs = append(errs, lineError{v.Line, fmt.Sprintf("rate: %s 0: nothing would cross; leave the key out for no limit", k.key)})
		default:
			*k.dst = x
		}
	}
	if n.Kind == yaml.MappingNode && len(vals) == 0 {
		errs = append(errs, lineError{n.Line, "rate: no limit given: want packets, bytes or both (a second, each way)"})
	}
	for _, b := range []struct{ burst, rate string }{{"burst_packets", "packets"}, {"burst_bytes", "bytes"}} {
		if vals[b.burst] != nil && vals[b.rate] == nil {
			errs = append(errs, lineError{vals[b.burst].Line, fmt.Sprintf("rate: %s without %s: a burst of what rate?", b.burst, b.rate)})
		}
	}
	if r.BurstBytes > 0 && r.BurstBytes < MaxDatagram {
		errs = append(errs, lineError{vals["burst_bytes"].Line, fmt.Sprintf("rate: burst_bytes %d: below %d bytes (the largest datagram) a long datagram could never cross", r.BurstBytes, MaxDatagram)})
	}
	if r.Packets > 0 && r.BurstPackets == 0 {
		r.BurstPackets = max(r.Packets/10, 1)
	}
	if r.Bytes > 0 && r.BurstBytes == 0 {
		r.BurstBytes = max(r.Bytes/10, MaxDatagram)
	}
	return errs
}

// Line is where the group is defined in its file.
func (g *Group) Line() int { return g.line }

// UnmarshalYAML decodes a group from its node.
func (g *Group) UnmarshalYAML(n *yaml.Node) error {
	g.line, g.keys = n.Line, linesOf(n)
	// What is wrong is named with the group in validateGroups.
	vals, errs := mapping(n, "", "name", "group", "roce", "ib", "direction", "mgid", "peers", "loop_window", "rate", "busy_poll", "busy_poll_cpus", "busy_poll_idle",
		"joined_on", "within", "max_groups")
	g.notMapping = vals == nil
	for _, k := range []struct {
		key string
		dst *string
	}{{"name", &g.Name}, {"roce", &g.RoCE}, {"ib", &g.IB}, {"direction", &g.Direction}, {"mgid", &g.MGID}, {"joined_on", &g.JoinedOn}} {
		scalar(vals, k.key, "", k.dst, &errs)
	}
	g.Group, _ = parsed(vals, "group", "", netip.ParseAddr, wantAddr, &errs)
	g.Within, _ = parsed(vals, "within", "", netip.ParsePrefix, wantPrefix, &errs)
	scalar(vals, "max_groups", "", &g.MaxGroups, &errs)
	g.setKeys = map[string]bool{}
	for k := range vals {
		g.setKeys[k] = true
	}
	if v := vals["rate"]; v != nil {
		g.rateErrs = decodeRate(v, &g.Rate)
	}
	scalar(vals, "busy_poll", "", &g.BusyPoll, &errs)
	g.BusyPollCPUs = cpuList(vals, &errs)
	g.BusyPollIdle = busyPollIdle(vals, &errs)
	g.LoopWindow = DefaultLoopWindow
	if w, line := parsed(vals, "loop_window", "", time.ParseDuration, wantDuration, &errs); line != 0 {
		g.LoopWindow = w
		if w < 0 {
			errs = append(errs, lineError{line, fmt.Sprintf("loop_window %v: want 0 (off) or more", w)})
		}
	}
	if v := vals["peers"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			errs = append(errs, lineError{v.Line, "peers: want a list of addresses, as [\"198.18.1.9\"], got " + describe(v)})
		}
		for _, item := range v.Content {
			a, err := netip.ParseAddr(item.Value)
			if err != nil {
				errs = append(errs, lineError{item.Line, fmt.Sprintf("peers %q: not an IP address", item.Value)})
				continue
			}
			g.Peers = append(g.Peers, a.Unmap())
		}
	}
	g.errs = errs
	return nil
}

// validateGroups checks the multicast groups.
func (c *Config) validateGroups(bad func(int, string, ...any)) {
	names := map[string]int{}
	for i := range c.Groups {
		g := &c.Groups[i]
		at := func(keys ...string) int { return g.keys.at(g.line, keys...) }
		for _, errs := range [][]lineError{g.errs, g.rateErrs} {
			for _, e := range errs {
				bad(e.line, "%s%s", owner("group", g.Name), e.msg)
			}
		}
		if g.notMapping {
			continue
		}
		switch {
		case g.Name == "":
			bad(g.line, "group without a name")
		case !namePattern.MatchString(g.Name):
			bad(at("name"), "group name %q: letters, digits, '.', '_' and '-' only", g.Name)
		case names[g.Name] != 0:
			bad(at("name"), "group %q is defined twice (first at line %d)", g.Name, names[g.Name])
		default:
			names[g.Name] = at("name")
		}
		g.Group = g.Group.Unmap()
		if g.JoinedOn != "" || g.setKeys["within"] || g.setKeys["max_groups"] {
			l, _ := c.Leg(g.RoCE)
			validateJoined(g, l.IP.Is6(), bad)
		} else if len(g.errs) == 0 && !g.Group.IsValid() {
			bad(g.line, "group %q: no group: want an IP multicast address (or joined_on)", g.Name)
		} else if len(g.errs) == 0 && !g.Group.IsMulticast() {
			bad(at("group"), "group %q: group %v is not an IP multicast address", g.Name, g.Group)
		}
		switch g.Direction {
		case "":
			g.Direction = DirectionBoth
		case DirectionBoth, DirectionIBToRoCE, DirectionRoCEToIB:
		default:
			bad(at("direction"), "group %q: direction %q: want both, ib_to_roce or roce_to_ib", g.Name, g.Direction)
		}
		validateBusyPoll(g, bad)
		switch g.MGID {
		case "":
			g.MGID = MGIDRDMACM
		case MGIDRDMACM, MGIDIPoIB:
		default:
			bad(at("mgid"), "group %q: mgid %q: want rdma_cm or ipoib", g.Name, g.MGID)
		}
		for _, side := range []struct{ key, leg string }{{"roce", g.RoCE}, {"ib", g.IB}} {
			l, ok := c.Leg(side.leg)
			line := at(side.key)
			switch {
			case side.leg == "":
				bad(g.line, "group %q: no %s leg", g.Name, side.key)
			case !ok && c.notList["legs"]: // no leg could be read
			case !ok:
				bad(line, "group %q: %s leg %q does not exist", g.Name, side.key, side.leg)
			case l.Kind == KindQUIC:
				bad(line, "group %q: %s leg %q is a quic leg; groups are on userspace and verbs legs", g.Name, side.key, side.leg)
			case side.key == "roce" && l.Kind != KindUserspace:
				bad(line, "group %q: roce leg %q: want a userspace leg", g.Name, side.leg)
			case l.IP.IsValid() && g.Group.IsValid() && l.IP.Is4() != g.Group.Is4():
				bad(line, "group %q: %s leg %q is not of the group's address family", g.Name, side.key, side.leg)
			case g.JoinedOn != "" && l.IP.IsValid() && g.Within.IsValid() && l.IP.Is4() != g.Within.Addr().Is4():
				bad(line, "group %q: %s leg %q is not of within %v's address family", g.Name, side.key, side.leg, g.Within)
			case side.key == "ib" && g.MGID == MGIDIPoIB && l.Kind != KindVerbs:
				bad(line, "group %q: mgid ipoib: ib leg %q is a %s leg; the IPoIB form is joined on a verbs leg's InfiniBand port", g.Name, side.leg, l.Kind)
			}
		}
		if g.RoCE != "" && g.RoCE == g.IB {
			bad(at("ib"), "group %q: roce and ib are both leg %q", g.Name, g.RoCE)
		}
		if g.JoinedOn != "" && g.Within.IsValid() {
			for j := range c.Groups[:i] {
				o := &c.Groups[j]
				samePair := (o.RoCE == g.RoCE && o.IB == g.IB) || (o.RoCE == g.IB && o.IB == g.RoCE)
				if o.JoinedOn != "" && o.Within.IsValid() && samePair && o.Within.Overlaps(g.Within) {
					bad(at("within", "joined_on"), "group %q: within %v overlaps group %q's %v between the same legs: a group joined there would be relayed twice, or both ways by two relays blind to each other's sends (a loop); name a group joined on both sides, with direction both", g.Name, g.Within, o.Name, o.Within)
				}
			}
		}
		for _, p := range g.Peers {
			for _, name := range []string{g.RoCE, g.IB} {
				if l, ok := c.Leg(name); ok && l.IP == p {
					bad(at("peers"), "group %q: peer %v is leg %q's own address: peers are other gateways'", g.Name, p, name)
				}
			}
		}
	}
}

// validateJoined checks a group with joined_on (or with its keys) and
// sets its direction and defaults; v6 says its legs are IPv6 ones (the
// default within is then DefaultWithin6).
func validateJoined(g *Group, v6 bool, bad func(int, string, ...any)) {
	at := func(keys ...string) int { return g.keys.at(g.line, keys...) }
	var dir string
	switch g.JoinedOn {
	case SideIB:
		dir = DirectionRoCEToIB
	case SideRoCE:
		dir = DirectionIBToRoCE
	case "":
		bad(at("within", "max_groups"), "group %q: within and max_groups go with joined_on (roce or ib)", g.Name)
		return
	default:
		bad(at("joined_on"), "group %q: joined_on %q: want roce or ib (the side whose members' joins are relayed to)", g.Name, g.JoinedOn)
		return
	}
	if g.setKeys["group"] {
		bad(at("group"), "group %q: joined_on %s and group %v: a joined_on entry names no group (its groups are those joined on the %s side); give one or the other", g.Name, g.JoinedOn, g.Group, g.JoinedOn)
	}
	if g.Direction != "" && g.Direction != dir {
		bad(at("direction"), "group %q: direction %s: joined_on %s relays %s (to the members on the %s side), the only direction it has", g.Name, g.Direction, g.JoinedOn, dir, g.JoinedOn)
	}
	g.Direction = dir
	if g.BusyPoll || len(g.BusyPollCPUs) > 0 || g.BusyPollIdle != 0 {
		bad(at("busy_poll", "busy_poll_cpus", "busy_poll_idle"), "group %q: busy_poll with joined_on: each group found would hold a CPU while it lasts; busy-poll groups named by address", g.Name)
	}
	if g.MGID == MGIDIPoIB && g.JoinedOn == SideIB {
		bad(at("mgid"), "group %q: mgid ipoib with joined_on ib: members are found by IGMP on an Ethernet link, where a group's MGID is its IP mapping", g.Name)
	}
	block := DefaultWithin
	if g.Within.Addr().Is6() || !g.setKeys["within"] && v6 {
		block = DefaultWithin6
	}
	switch {
	case !g.setKeys["within"]:
		g.Within = block
	case !g.Within.IsValid():
		// parsed said why
	case !block.Contains(g.Within.Addr()) || g.Within.Bits() < block.Bits():
		bad(at("within"), "group %q: within %v: not within the multicast block %v", g.Name, g.Within, block)
	case g.Within.Masked() != g.Within:
		bad(at("within"), "group %q: within %v: host bits set (the prefix is %v)", g.Name, g.Within, g.Within.Masked())
	}
	switch {
	case !g.setKeys["max_groups"]:
		g.MaxGroups = DefaultMaxGroups
	case g.MaxGroups < 1 || g.MaxGroups > MaxMaxGroups:
		bad(at("max_groups"), "group %q: max_groups %d: want 1 to %d", g.Name, g.MaxGroups, MaxMaxGroups)
	}
}

// validateQUIC checks a quic leg's addresses and files.
func (c *Config) validateQUIC(l *Leg, bad func(int, string, ...any)) {
	at := func(keys ...string) int { return l.keys.at(l.line, keys...) }
	for _, a := range []struct {
		key, text string
		dst       *netip.AddrPort
	}{{"listen", l.Listen, &l.listen}, {"peer", l.Peer, &l.peer}} {
		if a.text == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(a.text)
		if err != nil || ap.Port() == 0 {
			bad(at(a.key), "leg %q: %s %q: want an IP address and a port, as \"10.0.0.2:7471\"", l.Name, a.key, a.text)
			continue
		}
		*a.dst = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if l.Listen == "" && l.Peer == "" {
		bad(l.line, "leg %q: a quic leg needs listen (accept the peer gateway) or peer (connect to it), or both", l.Name)
	}
	if l.listen.IsValid() && l.IP.IsValid() && l.listen.Addr() != l.IP {
		bad(at("listen"), "leg %q: listen %v is not the leg's address (%v)", l.Name, l.listen, l.IP)
	}
	if l.peer.IsValid() && l.IP.IsValid() && l.peer.Addr().Is4() != l.IP.Is4() {
		bad(at("peer"), "leg %q: peer %v is not of the leg's address family (%v)", l.Name, l.peer, l.IP)
	}
	if l.Over != "" {
		switch v, ok := c.Leg(l.Over); {
		case !ok:
			bad(at("over"), "leg %q: over %q: no such leg", l.Name, l.Over)
		case v.Kind != KindVerbs:
			bad(at("over"), "leg %q: over %q: a %s leg; over names a verbs leg, whose port's IPoIB interface the tunnel runs on", l.Name, l.Over, v.Kind)
		}
	}
	for _, f := range []struct{ key, v string }{{"cert", l.Cert}, {"key", l.Key}, {"ca", l.CA}} {
		if f.v == "" {
			bad(l.line, "leg %q: a quic leg needs %s (PEM): the tunnel is mutual TLS", l.Name, f.key)
		}
	}
}

// maxFallbackTimer bounds a fallback's after and retry: longer is a typo
// (a unit left out) more likely than a wish.
const maxFallbackTimer = time.Hour

// validateFallback checks a route's fallback: a target on a quic leg (a
// peer gateway) other than the legs the route listens and connects on.
func (c *Config) validateFallback(r *Route, listen *Leg, bad func(int, string, ...any)) {
	f := &r.Fallback
	l, ok := c.Leg(f.Leg)
	switch {
	case f.Leg == "":
		bad(f.line, "route %q: fallback has no leg", r.Name)
	case !ok:
		bad(f.line, "route %q: fallback leg %q does not exist", r.Name, f.Leg)
	case l.Kind != KindQUIC:
		bad(f.line, "route %q: fallback leg %q is a %s leg: a fallback goes through a peer gateway (a quic leg)", r.Name, f.Leg, l.Kind)
	case f.Leg == r.Target.Leg:
		bad(f.line, "route %q: fallback leg %q is the route's target leg already", r.Name, f.Leg)
	case listen != nil && f.Leg == listen.Name:
		bad(f.line, "route %q: fallback leg %q is the leg the route listens on", r.Name, f.Leg)
	case !f.Addr.IsValid():
		bad(f.line, "route %q: fallback has no addr: %s", r.Name, wantAddrPort)
	case f.Addr.Port() == 0:
		bad(f.line, "route %q: fallback addr %v: port 0: %s", r.Name, f.Addr, wantAddrPort)
	default:
		f.Addr = netip.AddrPortFrom(f.Addr.Addr().Unmap(), f.Addr.Port())
	}
}
