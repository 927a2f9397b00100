package guest

import "github.com/rbridge/rbridge/internal/netns"

// Do runs f on an OS thread that has entered the namespace and returns f's
// error. Sockets that f opens stay in the namespace after Do returns, so f
// can open them and hand them out (internal/netns.Do).
func (n Netns) Do(f func() error) error { return netns.Do(n.Name, f) }
