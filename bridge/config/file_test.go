package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestLoadTooLarge: a file above MaxFileSize is refused, naming the file
// and the bound, though what it holds is YAML; one at the bound is read.
func TestLoadTooLarge(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		size int
		want string // "" parses
	}{
		{"at the bound", config.MaxFileSize, ""},
		{"a byte more", config.MaxFileSize + 1, "big.yaml: the file is larger than 1 MiB (1048576 bytes), the most a configuration file may be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// good, padded with a comment to size.
			pad := tc.size - len(good) - 2
			path := filepath.Join(dir, "big.yaml")
			if err := os.WriteFile(path, []byte(good+"#"+strings.Repeat("x", pad)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load(path)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a file of %d bytes: %v", tc.size, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("a file of %d bytes: error %v, want %q", tc.size, err, tc.want)
			}
		})
	}
}

// TestLoadEndless: a file that never ends (a pipe here, /dev/zero for the
// user who mistyped) is refused once it passed the bound, not read to its
// end first.
func TestLoadEndless(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		w, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		line := []byte("# " + strings.Repeat("x", 4093) + "\n")
		for range 4 * config.MaxFileSize / len(line) {
			if _, err := w.Write(line); err != nil {
				return // the reader stopped: refused
			}
		}
		<-stop // open, never ending
	}()
	done := make(chan error, 1)
	go func() {
		_, err := config.Load(path)
		done <- err
	}()
	select {
	case err := <-done:
		var es config.Errors
		if !errors.As(err, &es) || !strings.Contains(err.Error(), "fifo: the file is larger than 1 MiB") {
			t.Errorf("error %v, want the file refused as larger than 1 MiB", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Load still reads a file that never ends, 10 s on")
	}
}
