package harness

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Image is a cached guest base image for one kernel.
type Image struct {
	Kernel  string          // version, e.g. 6.1.0-57-amd64
	Vmlinuz string          // /boot/vmlinuz-<Kernel>
	Initrd  string          // the base initramfs (gzip'd cpio)
	Files   map[string]bool // absolute paths inside the base initramfs
}

// ImageOptions says where the image's inputs and cache live.
type ImageOptions struct {
	Root   string    // repository root
	Cache  string    // cache directory, e.g. <root>/.cache/vm
	Kernel string    // kernel version; empty: the one linux-image-amd64 installed
	Log    io.Writer // progress and the scripts' output
}

// imagePackages are the Debian packages whose files go into the base image:
// a new version of any of them makes a new image.
var imagePackages = []string{"busybox-static", "rdma-core", "ibverbs-providers", "ibverbs-utils",
	"libibverbs1", "librdmacm1", "rdmacm-utils", "perftest", "iproute2", "kmod", "libc6", "open-iscsi"}

// KernelVersion returns the version of the kernel that linux-image-amd64 installed.
func KernelVersion(root string) (string, error) {
	out, err := exec.Command("bash", filepath.Join(root, "scripts/vm-kernel.sh")).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("find the guest kernel: %s", strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("find the guest kernel: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// packageVersions returns "name version" lines for the given Debian packages.
func packageVersions(pkgs ...string) (string, error) {
	args := append([]string{"-W", "-f=${Package} ${Version}\n"}, pkgs...)
	out, err := exec.Command("dpkg-query", args...).Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query %s: %w (run: make deps-vm)", strings.Join(pkgs, " "), err)
	}
	return string(out), nil
}

// EnsureImage returns the base image for the kernel, building siw.ko and the
// initramfs first when the cache has none for the current inputs.
func EnsureImage(o ImageOptions) (*Image, error) {
	kv := o.Kernel
	if kv == "" {
		var err error
		if kv, err = KernelVersion(o.Root); err != nil {
			return nil, err
		}
	}
	vmdir := filepath.Join(o.Root, "integration/vm")
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(vmdir, name))
		return string(b), err
	}

	// siw.ko depends on the kernel, its headers, the source and the build script.
	srcVersions, err := packageVersions("linux-source-6.1", "linux-headers-"+kv, "linux-image-"+kv)
	if err != nil {
		return nil, err
	}
	mksiw, err := read("mksiw.sh")
	if err != nil {
		return nil, err
	}
	siw := filepath.Join(o.Cache, "siw-"+kv+"-"+Key("siw", kv, srcVersions, mksiw), "siw.ko")
	if _, err := os.Stat(siw); err != nil {
		fmt.Fprintf(o.Log, "vmrun: building siw.ko for %s (cache miss)\n", kv)
		if err := runScript(o.Log, filepath.Join(vmdir, "mksiw.sh"), kv, siw+".tmp"); err != nil {
			return nil, fmt.Errorf("build siw.ko: %w", err)
		}
		if err := os.Rename(siw+".tmp", siw); err != nil {
			return nil, err
		}
	}

	// The base image depends on the kernel, siw.ko, the userland packages and the scripts.
	versions, err := packageVersions(imagePackages...)
	if err != nil {
		return nil, err
	}
	mkimage, err := read("mkimage.sh")
	if err != nil {
		return nil, err
	}
	initScript, err := read("init.sh")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.Cache, "base-"+kv+"-"+Key("base", kv, srcVersions, versions, mksiw, mkimage, initScript))
	initrd := filepath.Join(dir, "base.cpio.gz")
	if _, err := os.Stat(initrd + ".files"); err != nil {
		fmt.Fprintf(o.Log, "vmrun: building the guest base image for %s (cache miss)\n", kv)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		tmp := filepath.Join(dir, "tmp.cpio.gz")
		if err := runScript(o.Log, filepath.Join(vmdir, "mkimage.sh"), kv, siw, filepath.Join(vmdir, "init.sh"), tmp); err != nil {
			return nil, fmt.Errorf("build the base image: %w", err)
		}
		if err := os.Rename(tmp, initrd); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp+".files", initrd+".files"); err != nil {
			return nil, err
		}
		pruneStale(o.Cache, "base-"+kv+"-", dir)
	} else {
		fmt.Fprintf(o.Log, "vmrun: guest base image for %s from the cache (%s)\n", kv, dir)
	}
	list, err := os.ReadFile(initrd + ".files")
	if err != nil {
		return nil, err
	}
	files := map[string]bool{}
	for _, f := range strings.Split(string(list), "\n") {
		if f != "" {
			files[f] = true
		}
	}
	return &Image{Kernel: kv, Vmlinuz: "/boot/vmlinuz-" + kv, Initrd: initrd, Files: files}, nil
}

// pruneStale removes older cached directories with the same prefix as keep.
func pruneStale(cache, prefix, keep string) {
	old, _ := filepath.Glob(filepath.Join(cache, prefix+"*"))
	for _, d := range old {
		if d != keep {
			os.RemoveAll(d)
		}
	}
}

func runScript(log io.Writer, script string, args ...string) error {
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(script), err)
	}
	return nil
}
