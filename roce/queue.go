package roce

// MaxQueues is the most receive queues QueueOf spreads QPs over: the
// sockets of one SO_REUSEPORT group that package udpconn steers between
// (a userspace leg's receive loops).
const MaxQueues = 256

// QueueOf is the receive queue, of n, that a packet to destination QP qpn
// belongs to: the special QPs 0 and 1 (the CM's MADs) and the multicast
// QPN 0xFFFFFF go to queue 0, any other QP to qpn % n. A device that
// serves queue i numbers its QPs so that QueueOf gives i, and the kernel's
// steering (udpconn's reuseport program, which computes the same) brings
// their packets to its socket. n below 2 means one queue: 0.
func QueueOf(qpn uint32, n int) int {
	qpn &= 0xffffff
	if n < 2 || qpn <= 1 || qpn == 0xffffff {
		return 0
	}
	return int(qpn % uint32(n))
}
