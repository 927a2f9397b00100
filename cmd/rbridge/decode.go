package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/roce/capture"
)

func newDecodeCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "decode [--json] FILE",
		Short: "Decode the RoCEv2 packets in a pcap or pcapng capture",
		Long: `decode reads a capture (pcap or pcapng, gzipped or not; Ethernet, raw IP,
or Linux cooked v1 or v2 (tcpdump -i any) link types) and prints every
packet: the BTH, the extension headers its opcode carries, the payload
length, and whether the ICRC is right. Packets
that are not RoCEv2 (UDP to port 4791) are listed as such; malformed ones say
what is wrong. FILE "-" reads standard input.

With --json, one JSON object per packet per line, with the keys
n, roce, src, dst, opcode, opcode_num, se, migreq, pad, pkey, fecn, becn,
dqpn, ackreq, psn, payload_len, icrc, icrc_ok, and where present reth{va,rkey,
dma_len}, aeth{syndrome,msn}, imm, ieth{rkey}, deth{qkey,sqpn},
atomic_eth{va,rkey,swap_add,compare}, atomic_ack_eth{orig}, and error.
icrc is the CRC-32 value; on the wire it is stored little-endian, so
Wireshark, which shows the four bytes in wire order, prints it byte-swapped.

A summary goes to standard error, also when the capture ends in the middle
of a packet (the error follows it). The exit status is 0 when the capture
was read to the end, whatever its packets held.`,
		Example: `  rbridge decode testdata/sample.pcapng
  rbridge decode --json capture.pcap | jq 'select(.opcode == "RC_RDMA_READ_REQUEST")'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, name, err := openInput(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			defer in.Close()
			format := capture.Text
			if jsonOut {
				format = capture.JSON
			}
			st, err := capture.Dump(cmd.OutOrStdout(), in, format)
			if err != nil && st.Packets == 0 {
				return fmt.Errorf("decode %s: %w", name, err)
			}
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
	return cmd
}

func openInput(path string, stdin io.Reader) (io.ReadCloser, string, error) {
	if path == "-" {
		return io.NopCloser(stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, path, err
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, path, fmt.Errorf("decode %s: a directory, not a capture file", path)
	}
	return f, path, nil
}
