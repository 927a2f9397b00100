package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

func newDecodeCommand() *cobra.Command {
	var jsonOut bool
	var port int
	cmd := &cobra.Command{
		Use:   "decode [--json] [--port N] FILE",
		Short: "Decode the RoCEv2 packets in a pcap or pcapng capture",
		Long: `decode reads a capture (pcap or pcapng, gzipped or not; Ethernet, raw IP,
or Linux cooked v1 or v2 (tcpdump -i any) link types) and prints every
packet on one line: its number, the time (UTC), the endpoints, and for
RoCEv2 (UDP to port 4791, or --port) the BTH, the extension headers its opcode carries
(RD and XRC ones too), the payload length, and whether the ICRC is right;
then VLAN tags (id, priority), a DSCP other than 0 and, for a cooked
capture, the interface and direction. Packets that are not RoCEv2 say why
(IP fragments among them: they are not reassembled); malformed ones say
what is wrong; packets the capture's snap length cut are decoded up to the
cut. FILE "-" reads standard input; lines appear as packets arrive, so
decode can follow tcpdump -U -w -.

With --json, one JSON object per packet per line, with the keys
n, roce, src, dst, opcode, opcode_num, se, migreq, pad, pkey, fecn, becn,
dqpn, ackreq, psn, payload_len, icrc, icrc_ok, and where present reth{va,rkey,
dma_len}, aeth{syndrome,msn}, imm, ieth{rkey}, deth{qkey,sqpn},
atomic_eth{va,rkey,swap_add,compare}, atomic_ack_eth{orig}, rdeth{eec},
xrceth{srq}, and error; then time (RFC 3339, UTC), cooked{ifindex,arphrd,
pkttype}, vlan[{id,pcp,dei,tpid}] (outermost first), ip{version,src,dst,
dscp,ecn,ttl,proto,id,df,flow_label,ext_headers,frag{id,offset,more}},
not_roce (why the packet is not RoCEv2), note (what was not checked),
interface (the pcapng interface, when the capture has several; "if=N" in
the text) and capture (what the file's record of the packet claimed that
does not add up: a captured length above the snap length, an original
length below the captured one; the packet is read as captured).
src and dst are address:port, present once the UDP header decoded.
icrc is the CRC-32 value; on the wire it is stored little-endian, so
Wireshark, which shows the four bytes in wire order, prints it byte-swapped.

A summary goes to standard error, also when the capture ends in the middle
of a packet (the error follows it): every packet is RoCEv2 (some of which
had a bad ICRC or were cut by the snap length), malformed (to the RoCEv2
port, with headers that do not decode) or other.`,
		Example: `  rbridge decode testdata/sample.pcapng
  rbridge decode --json capture.pcap | jq 'select(.opcode == "RC_RDMA_READ_REQUEST")'
  rbridge decode --json capture.pcap | jq 'select(.ip.ecn == 3) | .dst'
  tcpdump -i any -U -w - udp port 4791 | rbridge decode -
  rbridge decode --port 50000 demo.pcap`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("decode takes one capture file (- for standard input), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if port < 1 || port > 65535 {
				return usageError(cmd, fmt.Errorf("--port %d: want 1 to 65535", port))
			}
			in, name, err := openInput(args[0], cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("decode %s: %w", name, err)
			}
			defer in.Close()
			format := capture.Text
			if jsonOut {
				format = capture.JSON
			}
			r, err := capture.NewReader(in)
			if err != nil {
				return fmt.Errorf("decode %s: %w", name, err)
			}
			st, err := capture.DumpWith(cmd.OutOrStdout(), r, capture.DumpOptions{Format: format, Port: uint16(port)})
			// A capture that ends in the middle still gets its summary,
			// of the packets before the error that follows it.
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", name, st)
			if err != nil {
				return fmt.Errorf("decode %s: %w", name, err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "one JSON object per packet per line")
	cmd.Flags().IntVar(&port, "port", int(roce.Port), "the UDP port RoCEv2 is on (rbridge's tests and demo use others)")
	return cmd
}

func openInput(path string, stdin io.Reader) (io.ReadCloser, string, error) {
	if path == "-" {
		return io.NopCloser(stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, path, errors.Unwrap(err) // the *PathError's path is named already
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, path, errors.New("a directory, not a capture file")
	}
	return f, path, nil
}
