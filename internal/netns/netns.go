// Package netns runs code in a named network namespace (ip netns add):
// the sockets it opens there stay there.
package netns

// Path returns the nsfs path of the namespace ip netns names name.
func Path(name string) string { return "/run/netns/" + name }
