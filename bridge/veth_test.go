package bridge_test

import (
	"testing"

	"github.com/rbridge/rbridge/internal/vethtest"
)

// vethNamespaces is vethtest.Namespaces with one queue on each end.
func vethNamespaces(t *testing.T, why, name, gwAddr, peerAddr string) (gwNS, peerNS, gwIf, peerIf string) {
	t.Helper()
	return vethtest.Namespaces(t, why, name, gwAddr, peerAddr, 1)
}

// vethNamespacesQueues is vethtest.Namespaces: n transmit and receive
// queues on each end.
func vethNamespacesQueues(t *testing.T, why, name, gwAddr, peerAddr string, n int) (gwNS, peerNS, gwIf, peerIf string) {
	t.Helper()
	return vethtest.Namespaces(t, why, name, gwAddr, peerAddr, n)
}
