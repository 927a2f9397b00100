// Package xdp holds rbridge's XDP program for the Ethernet NIC (classify
// RoCEv2 packets, redirect those for rbridge's queue pairs to AF_XDP, count,
// answer ECN-CE with CNPs) and the AF_XDP socket that gives the userspace
// RoCEv2 transport its fast packet I/O.
//
// Not implemented yet: this package holds only its documentation.
package xdp
