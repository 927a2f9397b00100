package config

import (
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest configuration file read: a gateway's legs,
// routes and groups take kilobytes, so a file above it is the wrong file
// (a log, /dev/zero) and is refused before it is read whole.
const MaxFileSize = 1 << 20

// ReadFile reads the configuration file at path, refusing one above
// MaxFileSize without reading further (a file that never ends, as
// /dev/zero, is refused at once).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, Errors{tooLarge(path)}
	}
	return b, nil
}

func tooLarge(file string) *Error {
	return &Error{File: file, Msg: fmt.Sprintf("the file is larger than 1 MiB (%d bytes), the most a configuration file may be: is it the right file?", MaxFileSize)}
}

// LoadAdmin reads the admin server's settings alone from the file at
// path: its YAML (as Load reads it: at most MaxFileSize, one document,
// aliases resolved) and the admin key, not the rest, so that a file the
// gateway would refuse still names the gateway's admin server (rbridge
// reload). Without the key, Listen is DefaultAdminListen.
func LoadAdmin(path string) (*Admin, error) {
	b, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	root, es := document(path, b)
	if es != nil {
		return nil, es
	}
	if root.Kind != yaml.MappingNode {
		return nil, Errors{{File: path, Line: root.Line, Msg: "want a mapping of keys (legs, routes, groups, admin, pool), got " + describe(root)}}
	}
	a := &Admin{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k, v := root.Content[i], root.Content[i+1]; k.Value == "admin" && !isNull(v) {
			_ = a.UnmarshalYAML(v)
		}
	}
	a.check(func(line int, format string, args ...any) {
		es = append(es, &Error{File: path, Line: line, Msg: fmt.Sprintf(format, args...)})
	})
	if es != nil {
		return nil, es
	}
	return a, nil
}
