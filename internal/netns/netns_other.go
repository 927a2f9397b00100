//go:build !linux

package netns

import "errors"

// Do runs f in the caller's namespace; other namespaces need Linux.
func Do(name string, f func() error) error {
	if name == "" {
		return f()
	}
	return errors.New("network namespaces need Linux")
}
