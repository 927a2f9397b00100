#!/bin/sh
# /init of the integration guest (busybox ash). It loads rxe and siw, builds the
# topology below, checks it, runs the direct-path baseline (perftest -R and rping
# over rxe and over siw), runs every test binary that the runner put under
# /tests once per device pass, and powers off. Lines starting with "@@RB " are
# for the host runner (integration/cmd/vmrun), which parses them:
#
#   @@RB STEP <name>                      a setup step starts
#   @@RB FAIL <step>: <message>           a step failed; nothing after it runs
#   @@RB BASE BEGIN <tool> <kind>         a baseline client's output follows
#   @@RB BASE RETRY <tool> <kind>: <why>   the pair is run again; its output follows
#   @@RB BASE END <tool> <kind> rc=<n> [elapsed_ms=<n> iters=<n>]
#   @@RB BEGIN <id> <device>              a test binary's events follow, as test2json lines
#   @@RB END <id> <device> rc=<n>
#   @@RB FILE <id> <device> <name> <base64>   a line of a file the binary left in
#                                         RBRIDGE_ARTIFACTS (integration/guest.Artifact)
#   @@RB FILE-END <id> <device> <name> bytes=<n> sha256=<hex>   that file ended
#   @@RB STATUS rc=<n>                    the last line: 0 when everything passed
#
# Topology (initial namespace unless said otherwise):
#
#   rxe0 on veth0 198.18.1.1 ==wire== veth1 -+- br1 198.18.1.2: rxe1
#                                 vuser0 ----+
#                                   |wire (two queues)
#   netns user0:                 vuser1 198.18.1.3  (userspace RoCEv2 endpoint)
#
#   siw0 on veth2 198.18.2.1 ==wire== veth3 198.18.2.2: siw1
#
#   rxe2 on veth4 198.18.3.1 ==wire== veth5 198.18.3.2: rxe3   (the IB fabric)
#
# The IB fabric stands for an InfiniBand island: rxe3 is its application's
# device and rxe2 the gateway's verbs leg. Nothing on the RoCE side (rxe0,
# rxe1, user0) reaches it: only traffic from 198.18.3.0/24 to it is forced
# over its wire, so RoCE packets from elsewhere end on lo, where rxe drops
# them, and user0 has no route there at all. Only the gateway crosses.
#
# rxe opens UDP 4791 in the initial namespace only and drops RoCE packets that
# arrive on lo, so traffic between two local addresses is forced over the veth
# wires: accept_local, no rp_filter, the local rule moved below per-subnet
# tables of /32 routes with a src, and permanent neighbours. user0 shares rxe1's
# L2 segment through br1, so a userspace endpoint there can reach rxe0 and rxe1.

PATH=/bin:/sbin:/usr/bin:/usr/sbin
export PATH HOME=/root TMPDIR=/tmp
IP=/usr/sbin/ip
MODPROBE=/usr/sbin/modprobe

step() { STEP=$1; echo "@@RB STEP $1"; }
status() {
	echo "@@RB STATUS rc=$1"
	sync
	poweroff -f
	sleep 60
}
die() { echo "@@RB FAIL $STEP: $*"; status 1; }
run() { "$@" || die "$* (exit $?)"; }

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo "@@RB KERNEL $(uname -r)"

CONFIG=/tests/config
[ -r $CONFIG ] && . $CONFIG

# Locked memory unbounded, as dist/rbridge.service's LimitMEMLOCK=infinity
# gives it: siw pins a registration against RLIMIT_MEMLOCK even for root
# (siw_umem_get consults no CAP_IPC_LOCK), and a gateway registers its pool
# on each verbs device and, staging over a device without memory windows,
# once more per connection.
step limits
ulimit -l unlimited || die "ulimit -l unlimited: the guest's shell cannot lift the locked-memory limit"

step modules
for m in crc32_generic crc32-pclmul crc32c_generic crc32c-intel libcrc32c veth bridge \
	rdma_rxe siw rdma_ucm ib_uverbs ib_umad; do
	$MODPROBE $m 2>/dev/null || case $m in crc32-pclmul|crc32c-intel) ;; *) die "modprobe $m failed: $($MODPROBE $m 2>&1)" ;; esac
done

step topology
run $IP link set lo up
sysctl -qw net.ipv4.conf.all.accept_local=1 net.ipv4.conf.default.accept_local=1 \
	net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
	net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.default.arp_ignore=1 \
	net.ipv4.conf.all.arp_announce=2 net.ipv4.conf.default.arp_announce=2 ||
	die "sysctl failed"
# veth <name> <mac> <peer> <peer mac>
veth() { run $IP link add "$1" address "$2" type veth peer name "$3" address "$4"; }
veth veth0 02:00:00:00:01:01 veth1 02:00:00:00:01:11
# vuser0/vuser1 have two queues each, as a NIC has several: what vuser0
# sends on its queue k (chosen by the hash of a flow, a QP's UDP source
# port) arrives on vuser1's queue k, so an AF_XDP leg there needs a socket
# on each.
run $IP link add vuser0 address 02:00:00:00:01:13 numtxqueues 2 numrxqueues 2 type veth \
	peer name vuser1 address 02:00:00:00:01:03 numtxqueues 2 numrxqueues 2
veth veth2 02:00:00:00:02:01 veth3 02:00:00:00:02:02
veth veth4 02:00:00:00:03:01 veth5 02:00:00:00:03:02
run $IP link add br1 address 02:00:00:00:01:02 type bridge forward_delay 0 stp_state 0
run $IP link set veth1 master br1
run $IP link set vuser0 master br1
run $IP addr add 198.18.1.1/24 dev veth0
run $IP addr add 198.18.1.2/24 dev br1
run $IP addr add 198.18.2.1/24 dev veth2
run $IP addr add 198.18.2.2/24 dev veth3
run $IP addr add 198.18.3.1/24 dev veth4
run $IP addr add 198.18.3.2/24 dev veth5
for dev in veth0 veth1 vuser0 br1 veth2 veth3 veth4 veth5; do
	run $IP link set $dev up
	sysctl -qw net.ipv4.conf.$dev.accept_local=1 net.ipv4.conf.$dev.rp_filter=0 2>/dev/null
done
run $IP netns add user0
run $IP link set vuser1 netns user0
run $IP -n user0 link set lo up
run $IP -n user0 addr add 198.18.1.3/24 dev vuser1
run $IP -n user0 link set vuser1 up
# The receive path of traffic entering br1 (the IP and UDP stack, and rxe1)
# runs on CPU 1 (RPS), not inside the sender's own transmit call: as on a
# host whose NIC spreads its queues over cores, a sender and the receive
# path it feeds run side by side. Both senders into rxe1 (rxe0 over veth1,
# the userspace endpoint over vuser0) get the same.
for q in /sys/class/net/veth1/queues/rx-0 /sys/class/net/vuser0/queues/rx-*; do
	echo 2 >$q/rps_cpus || die "RPS on $q"
done
# Every other veth that an RDMA device receives on steers each flow (a QP's
# UDP source port) to one CPU by its hash, as a NIC's RSS does. Without it,
# a veth's receive path runs on whichever CPU sent: rxe sends a QP's
# packets from the poster's CPU and from its own task's, and two CPUs'
# backlogs then deliver one QP's packets out of order, which a wire never
# does. The responder NAKs each such gap and the requester goes back N
# (rxe's out_of_seq_request and completer_retry_err counters), far more
# often than on any fabric.
for dev in veth0 veth4 veth5; do
	echo 3 >/sys/class/net/$dev/queues/rx-0/rps_cpus || die "RPS on $dev"
done
# The same for vuser1, where rbridge's userspace leg receives rxe1's
# packets: without it, a storage initiator on rxe1 sees the gateway NAK
# gaps no wire makes, and rxe's go-back-N runs its SEND queue's memory
# registrations (REG_MR) again, which fails on a registration still valid
# ("rxe_reg_fast_mr: ... not free") and stops the QP's requester until the
# initiator's I/O timeout (30 s and more for iSER and NVMe-oF).
$IP netns exec user0 sh -c 'for q in /sys/class/net/vuser1/queues/rx-*; do echo 3 >$q/rps_cpus || exit 1; done' || die "RPS on vuser1"
# Force local traffic between the two ends of each pair over the wire.
run $IP rule add pref 1000 lookup local
run $IP rule del pref 0
run $IP route add 198.18.1.2/32 dev veth0 src 198.18.1.1 table 101
run $IP route add 198.18.1.1/32 dev br1 src 198.18.1.2 table 101
run $IP route add 198.18.1.3/32 dev br1 src 198.18.1.2 table 101
run $IP rule add pref 100 iif lo to 198.18.1.0/24 lookup 101
run $IP route add 198.18.2.2/32 dev veth2 src 198.18.2.1 table 102
run $IP route add 198.18.2.1/32 dev veth3 src 198.18.2.2 table 102
run $IP rule add pref 100 iif lo to 198.18.2.0/24 lookup 102
run $IP route add 198.18.3.2/32 dev veth4 src 198.18.3.1 table 103
run $IP route add 198.18.3.1/32 dev veth5 src 198.18.3.2 table 103
run $IP rule add pref 100 iif lo from 198.18.3.0/24 to 198.18.3.0/24 lookup 103
run $IP neigh replace 198.18.1.2 lladdr 02:00:00:00:01:02 dev veth0 nud permanent
run $IP neigh replace 198.18.1.1 lladdr 02:00:00:00:01:01 dev br1 nud permanent
run $IP neigh replace 198.18.2.2 lladdr 02:00:00:00:02:02 dev veth2 nud permanent
run $IP neigh replace 198.18.2.1 lladdr 02:00:00:00:02:01 dev veth3 nud permanent
run $IP neigh replace 198.18.3.2 lladdr 02:00:00:00:03:02 dev veth4 nud permanent
run $IP neigh replace 198.18.3.1 lladdr 02:00:00:00:03:01 dev veth5 nud permanent

step devices
run rdma link add rxe0 type rxe netdev veth0
run rdma link add rxe1 type rxe netdev br1
run rdma link add siw0 type siw netdev veth2
run rdma link add siw1 type siw netdev veth3
run rdma link add rxe2 type rxe netdev veth4
run rdma link add rxe3 type rxe netdev veth5
for dev in rxe0 rxe1 siw0 siw1 rxe2 rxe3; do
	n=0
	until grep -q ACTIVE /sys/class/infiniband/$dev/ports/1/state 2>/dev/null; do
		n=$((n + 1))
		[ $n -le 300 ] || die "$dev port 1 not ACTIVE after 30 s: $(cat /sys/class/infiniband/$dev/ports/1/state 2>&1)"
		sleep 0.1
	done
done
rdma link show

step reachability
# ping_from <netns or -> <dst>
ping_from() {
	if [ "$1" = - ]; then out=$(ping -c 1 -W 10 "$2" 2>&1); else out=$($IP netns exec "$1" ping -c 1 -W 10 "$2" 2>&1); fi ||
		die "ping $2 from ${1#-}: $out"
}
ping_from - 198.18.1.2
ping_from - 198.18.1.1
ping_from - 198.18.2.2
ping_from - 198.18.2.1
ping_from - 198.18.1.3
ping_from user0 198.18.1.2
ping_from user0 198.18.1.1
out=$(ping -c 1 -W 10 -I 198.18.3.1 198.18.3.2 2>&1) || die "ping 198.18.3.2 from 198.18.3.1: $out"
out=$(ping -c 1 -W 10 -I 198.18.3.2 198.18.3.1 2>&1) || die "ping 198.18.3.1 from 198.18.3.2: $out"
if $IP netns exec user0 ping -c 1 -W 2 198.18.3.2 >/dev/null 2>&1; then
	die "user0 reaches the IB fabric (198.18.3.2) directly: it must not"
fi
echo "reachability: rxe pair, siw pair, the IB fabric and user0 answer ping; user0 cannot reach the IB fabric"

RC=0

# uptime_ms: milliseconds since boot, from /proc/uptime (centiseconds).
uptime_ms() {
	read -r up _ </proc/uptime
	cs=${up%.*}${up#*.}
	while [ "${cs#0}" != "$cs" ]; do cs=${cs#0}; done # no octal
	echo $((${cs:-0} * 10))
}

# wait_listen <comm>: waits until an rdma_cm listener of that program exists.
wait_listen() {
	n=0
	until rdma resource show cm_id 2>/dev/null | grep "state LISTEN" | grep -q "comm $1"; do
		n=$((n + 1))
		[ $n -le 600 ] || return 1
		sleep 0.1
	done
}

# spawn <name> <command...>: runs the command in the background with its
# output in /tmp/<name>.out; /tmp/<name>.rc appears with its exit status when
# it ends, and /tmp/<name>.pid holds its pid (busybox timeout execs the tool).
spawn() {
	name=$1
	shift
	rm -f /tmp/$name.rc /tmp/$name.out
	(
		timeout 300 "$@" >/tmp/$name.out 2>&1 &
		echo $! >/tmp/$name.pid
		wait $!
		echo $? >/tmp/$name.rc
	) &
	eval "${name}_job=\$!"
}

# attempt <tool> <server args> -- <client args>: runs one server/client pair.
# When one side fails, the other gets 3 s to end before it is killed (a
# perftest side waits forever for a peer that gave up). Sets crc and src.
attempt() {
	tool=$1
	shift
	sargs=
	while [ "$1" != -- ]; do sargs="$sargs $1"; shift; done
	shift
	spawn server $tool $sargs
	if ! wait_listen $tool; then
		echo "server never listened:"
		cat /tmp/server.out
		kill "$(cat /tmp/server.pid)" 2>/dev/null
		wait $server_job
		crc=1 src=1
		return
	fi
	t0=$(uptime_ms)
	spawn client $tool "$@"
	grace=0
	until [ -e /tmp/client.rc ] && [ -e /tmp/server.rc ]; do
		for side in client server; do
			[ -e /tmp/$side.rc ] && [ "$(cat /tmp/$side.rc)" != 0 ] && grace=$((grace + 1))
		done
		if [ $grace -eq 30 ]; then
			echo "one side failed; killing the other after 3 s"
			kill "$(cat /tmp/client.pid)" "$(cat /tmp/server.pid)" 2>/dev/null
		fi
		sleep 0.1
	done
	wait $client_job $server_job # not every child: rbridge run stays up across pairs
	t1=$(uptime_ms)
	awk 1 /tmp/client.out # ends the last line
	crc=$(cat /tmp/client.rc) src=$(cat /tmp/server.rc)
	if [ "$src" != 0 ]; then
		echo "server exited $src:"
		awk 1 /tmp/server.out
	fi
}

# base <tool> <kind> <server args> -- <client args>: runs one baseline pair and
# prints the client's output between BASE markers. perftest fails with
# "Can't produce a report", or prints inf figures, when it cannot
# calibrate its cycle counter (r^2 < 0.9), which TCG on a busy host causes
# now and then: such a pair is retried, at most nine times, and each retry is
# said on the console.
base() {
	tool=$1 kind=$2
	shift 2
	echo "@@RB BASE BEGIN $tool $kind"
	try=1
	while :; do
		[ -z "$GW_PID" ] || gw0=$(cpu_ticks $GW_PID)
		attempt $tool "$@"
		[ -z "$GW_PID" ] || gw1=$(cpu_ticks $GW_PID)
		rc=$crc
		[ "$rc" != 0 ] || rc=$src
		# Calibration failed: a side gave up, or the client printed inf
		# figures (a -nan t_stdev alone is not that: perftest squares each
		# round trip's distance from the average into an int, which
		# overflows from 46.3 ms, as round trips through the gateway under
		# TCG can be); or the client's connect found no listener yet (REJ reason
		# 8, or on siw a refused TCP connection), which the server's
		# per-device listeners, set up under TCG, can lose to: perftest then
		# crashes in its error path.
		why=
		if grep -q "Can't produce a report" /tmp/client.out /tmp/server.out 2>/dev/null ||
			grep -qiE "(^|[[:space:]])-?inf([[:space:]]|$)" /tmp/client.out; then
			why="perftest could not calibrate its clock under TCG (r^2 < 0.9)"
		elif grep -q "RDMA_CM_EVENT_REJECTED; error: 8" /tmp/client.out 2>/dev/null; then
			why="the client connected before the server's listener was up (REJ: invalid service ID)"
		elif [ "$kind" = siw ] && grep -q "ERRNO: Connection refused" /tmp/client.out 2>/dev/null; then
			# iWARP connects over TCP: the same race is a refused TCP
			# connection, and perftest's error path crashes (exit 139).
			why="the client connected before the server's listener was up (siw: TCP connection refused)"
		fi
		[ -n "$why" ] || break
		[ $try -le 9 ] || break
		try=$((try + 1))
		echo "@@RB BASE RETRY $tool $kind: $why"
	done
	if [ "$rc" != 0 ] && [ -n "$GW_PID" ]; then
		echo "rbridge run's log:"
		tail -40 /tmp/gateway.log
	fi
	[ "$rc" = 0 ] || RC=1
	gw=
	[ -z "$GW_PID" ] || gw=" gateway_cpu_ticks=$((gw1 - gw0))"
	echo "@@RB BASE END $tool $kind rc=$rc elapsed_ms=$((t1 - t0)) iters=$ITERS$gw"
}

# cpu_ticks <pid>: the process's user and system time in clock ticks.
cpu_ticks() {
	awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0
}

# gateway_start [keys]: runs rbridge run between the RoCE side and the IB
# fabric (the userspace leg in user0 over AF_XDP, with keys added, the
# verbs leg on rxe2) with a route from 198.18.1.3:18515 to rxe3's
# 198.18.3.2:18515; GW_PID is its pid.
gateway_start() {
	cat >/tmp/gateway.yaml <<-EOF
	legs:
	  - {name: roce, kind: userspace, interface: vuser1, ip: 198.18.1.3, io: afxdp, netns: user0${1:+, $1}}
	  - {name: ib, kind: verbs, ip: 198.18.3.1, device: rxe2}
	routes:
	  - name: to-ib
	    listen: {leg: roce, addr: "198.18.1.3:18515"}
	    target: {leg: ib, addr: "198.18.3.2:18515"}
	EOF
	: >/tmp/gateway.log
	/tests/bin/rbridge run --config /tmp/gateway.yaml >/tmp/gateway.log 2>&1 &
	GW_PID=$!
	i=0
	until grep -q "gateway running" /tmp/gateway.log; do
		i=$((i + 1))
		if [ $i -gt 600 ] || ! kill -0 $GW_PID 2>/dev/null; then
			echo "rbridge run did not start:"
			cat /tmp/gateway.log
			kill $GW_PID 2>/dev/null
			GW_PID=
			return 1
		fi
		sleep 0.1
	done
}

# gateway_stop: SIGTERM, and the exit status must be 0.
gateway_stop() {
	kill -TERM $GW_PID
	wait $GW_PID
	rc=$?
	[ $rc = 0 ] || { echo "rbridge run exited $rc after SIGTERM:"; tail -20 /tmp/gateway.log; RC=1; }
	GW_PID=
}

if [ "${BASELINE:-1}" = 1 ]; then
	step baseline
	BW_ITERS=${BW_ITERS:-1000}
	LAT_ITERS=${LAT_ITERS:-1000}
	RPING_COUNT=${RPING_COUNT:-200}
	for pair in "rxe rxe0 rxe1 198.18.1.2" "siw siw0 siw1 198.18.2.2"; do
		set -- $pair
		kind=$1 cdev=$2 sdev=$3 sip=$4
		ITERS=$BW_ITERS
		for tool in ib_send_bw ib_write_bw ib_read_bw; do
			base $tool $kind -R -d $sdev -n $BW_ITERS -- -R -d $cdev -n $BW_ITERS $sip
		done
		ITERS=$LAT_ITERS
		base ib_send_lat $kind -R -d $sdev -n $LAT_ITERS -- -R -d $cdev -n $LAT_ITERS $sip
		ITERS=$RPING_COUNT
		base rping $kind -s -a $sip -C $RPING_COUNT -S 64 -- -c -a $sip -C $RPING_COUNT -S 64
	done
	# Through the gateway, same run: client on rxe1, server on rxe3.
	if [ -x /tests/bin/rbridge ] && gateway_start; then
		ITERS=$BW_ITERS
		for tool in ib_send_bw ib_write_bw ib_read_bw; do
			base $tool rbridge-afxdp -R -d rxe3 -n $BW_ITERS -- -R -d rxe1 -n $BW_ITERS 198.18.1.3
		done
		ITERS=$LAT_ITERS
		base ib_send_lat rbridge-afxdp -R -d rxe3 -n $LAT_ITERS -- -R -d rxe1 -n $LAT_ITERS 198.18.1.3
		gateway_stop
		# The round trip again with the userspace leg busy-polled: its
		# loop spins on one of the guest's two vCPUs.
		if gateway_start "busy_poll: true"; then
			base ib_send_lat rbridge-afxdp-busy -R -d rxe3 -n $LAT_ITERS -- -R -d rxe1 -n $LAT_ITERS 198.18.1.3
			gateway_stop
		else
			RC=1
		fi
	else
		echo "baseline: rbridge run between the fabrics could not start (is /tests/bin/rbridge there?): its pairs are missing"
		RC=1
	fi
fi

# The device passes. Variables documented in integration/guest/doc.go.
export RBRIDGE_GUEST=1 RBRIDGE_USER_NETNS=user0 RBRIDGE_USER_NETDEV=vuser1 RBRIDGE_USER_IP=198.18.1.3 \
	RBRIDGE_USER_PEER_DEVICE=rxe1 RBRIDGE_USER_PEER_NETDEV=br1 RBRIDGE_USER_PEER_IP=198.18.1.2 \
	RBRIDGE_PREFIX_LEN=24 \
	RBRIDGE_IB_GATEWAY_DEVICE=rxe2 RBRIDGE_IB_GATEWAY_NETDEV=veth4 RBRIDGE_IB_GATEWAY_IP=198.18.3.1 \
	RBRIDGE_IB_PEER_DEVICE=rxe3 RBRIDGE_IB_PEER_NETDEV=veth5 RBRIDGE_IB_PEER_IP=198.18.3.2 \
	RBRIDGE_BINARY=/tests/bin/rbridge
# pass <device> <kind> <netdev> <ip> <peer device> <peer netdev> <peer ip>
pass() {
	export RBRIDGE_DEVICE=$1 RBRIDGE_DEVICE_KIND=$2 RBRIDGE_NETDEV=$3 RBRIDGE_IP=$4 \
		RBRIDGE_PEER_DEVICE=$5 RBRIDGE_PEER_NETDEV=$6 RBRIDGE_PEER_IP=$7
	while read -r id pkg; do
		RBRIDGE_ARTIFACTS=/tmp/artifacts/$id.$1
		export RBRIDGE_ARTIFACTS
		mkdir -p "$RBRIDGE_ARTIFACTS"
		echo "@@RB BEGIN $id $1"
		# test2json runs the binary and prints its events as JSON lines, ending
		# with the package's pass or fail (exit status included).
		(cd /tests/$id/src && exec /tests/test2json -t -p "$pkg" /tests/$id/test -test.v=test2json \
			-test.count="${COUNT:-1}" -test.timeout="${TEST_TIMEOUT:-15m}" -test.run="$RUN" \
			-test.bench="${BENCH:-}" -test.benchtime="${BENCHTIME:-1s}" -test.benchmem) </dev/null 2>&1
		rc=$?
		[ $rc -eq 0 ] || RC=1
		echo "@@RB END $id $1 rc=$rc"
		artifacts "$id" "$1"
	done </tests/manifest
}
# artifacts <id> <device>: the files the binary left in RBRIDGE_ARTIFACTS, to
# the host, each line marked (a kernel message between them cannot get in).
artifacts() {
	for f in "$RBRIDGE_ARTIFACTS"/*; do
		[ -f "$f" ] || continue
		name=${f##*/}
		base64 "$f" | while read -r line; do echo "@@RB FILE $1 $2 $name $line"; done
		echo "@@RB FILE-END $1 $2 $name bytes=$(($(wc -c <"$f"))) sha256=$(sha256sum "$f" | cut -d' ' -f1)"
	done
}
if [ -s /tests/manifest ]; then
	step tests
	pass rxe0 rxe veth0 198.18.1.1 rxe1 br1 198.18.1.2
	pass siw0 siw veth2 198.18.2.1 siw1 veth3 198.18.2.2
fi

status $RC
