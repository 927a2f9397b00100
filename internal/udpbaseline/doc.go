// Package udpbaseline is the floor rbridge's userspace transport is
// measured against (rbridge bench, roce/udpconn's benchmarks): messages cut
// into datagrams and sent through plain UDP sockets on loopback, with the
// transport's batching and window and none of its work.
//
// Batching: datagrams go out with sendmmsg and come in with recvmmsg, up to
// Options.Batch (64, as roce/udpconn) a call, through golang.org/x/net's
// ipv4 and ipv6 PacketConn (on Linux; one datagram a call elsewhere).
//
// Window: at most Options.Window messages, and at most MaxInflight
// datagrams (the most packets the transport leaves unacknowledged), are
// sent and not yet received. The receiving goroutine counts what arrives
// and wakes the sender when the window opens; the sender waits on that, not
// on a sleep. There is no reliability: a datagram that never arrives is
// counted as lost, and when nothing arrives for Options.StallTimeout the
// sender takes everything in flight as lost and goes on.
//
// Concurrency: a Flow's Send and Drain are called from one goroutine; the
// receiving goroutine (routineReceive) shares only atomic counters and the
// wake-up channel with it.
package udpbaseline
