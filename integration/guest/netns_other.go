//go:build !linux

package guest

import "errors"

// Do fails: network namespaces exist on Linux only.
func (n Netns) Do(f func() error) error {
	return errors.New("enter netns " + n.Name + ": network namespaces need Linux")
}
