module github.com/rbridge/rbridge

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/gopacket v1.1.19
	golang.org/x/sys v0.50.0
)
