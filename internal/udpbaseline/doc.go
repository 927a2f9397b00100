// Package udpbaseline is the floor rbridge's userspace transport is
// measured against (rbridge bench, roce/udpconn's benchmarks): messages cut
// into datagrams and sent through plain UDP sockets on loopback, with the
// transport's batching and window and none of its work.
//
// Batching: datagrams go out with sendmmsg and come in with recvmmsg, up to
// Options.Batch (64, as roce/udpconn) sends or reads a call, through
// golang.org/x/net's ipv4 and ipv6 PacketConn (on Linux; one datagram a
// call elsewhere). With the kernel's UDP batching, on by default as in
// roce/udpconn (Options.NoGSO and NoGRO turn it off): a send carries up to
// 64 datagrams and 64 KiB (UDP_SEGMENT), and a read a GRO buffer of as
// many (UDP_GRO), counted as the datagrams in it. A send the kernel
// refuses with EIO turns GSO off for the flow. Result counts the calls
// and the sends and reads they held.
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
