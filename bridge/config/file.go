package config

import (
	"fmt"
	"io"
	"os"
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
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, Errors{tooLarge(path)}
	}
	return b, nil
}

func tooLarge(file string) *Error {
	return &Error{File: file, Msg: fmt.Sprintf("the file is larger than 1 MiB (%d bytes), the most a configuration file may be: is it the right file?", MaxFileSize)}
}
