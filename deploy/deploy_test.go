// Package deploy_test checks the deployment files against the daemon they
// deploy: the Kubernetes manifests' config parses as rbridge run's does,
// the probes reach its admin server's health check, the capabilities are
// the systemd unit's, and the container builds the command at the Go
// version go.mod asks for. kubectl cannot validate them here: it needs a
// cluster for the schema.
package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rbridge/rbridge/bridge/config"
)

type container struct {
	Name            string   `yaml:"name"`
	Args            []string `yaml:"args"`
	SecurityContext struct {
		Capabilities struct {
			Drop []string `yaml:"drop"`
			Add  []string `yaml:"add"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet struct {
		Host string `yaml:"host"`
		Port int    `yaml:"port"`
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
}

type object struct {
	Kind     string                `yaml:"kind"`
	Metadata struct{ Name string } `yaml:"metadata"`
	Data     map[string]string     `yaml:"data"`
	Spec     struct {
		Template struct {
			Spec struct {
				HostNetwork bool        `yaml:"hostNetwork"`
				Containers  []container `yaml:"containers"`
				Volumes     []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					EmptyDir *struct{} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func manifests(t *testing.T) map[string]object {
	t.Helper()
	b, err := os.ReadFile("kubernetes/rbridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]object{}
	d := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var o object
		if err := d.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("kubernetes/rbridge.yaml: %v", err)
		}
		out[o.Kind] = o
	}
	return out
}

func TestKubernetesDaemonSet(t *testing.T) {
	m := manifests(t)
	ds, cm := m["DaemonSet"], m["ConfigMap"]
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.Containers) != 1 {
		t.Fatalf("the DaemonSet: hostNetwork %v, %d containers; want the host's network and one", spec.HostNetwork, len(spec.Containers))
	}
	c := spec.Containers[0]

	// The config the container reads is the ConfigMap's, and parses.
	if len(c.Args) != 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
		t.Fatalf("args %q: want run --config FILE", c.Args)
	}
	dir, file := path.Dir(c.Args[2]), path.Base(c.Args[2])
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && vm.MountPath == dir && v.ConfigMap.Name == cm.Metadata.Name {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Fatalf("%s is not the ConfigMap %q mounted", c.Args[2], cm.Metadata.Name)
	}
	cfg, err := config.Parse("ConfigMap "+file, []byte(cm.Data[file]))
	if err != nil {
		t.Fatalf("the ConfigMap's %s: %v", file, err)
	}

	// The control socket's directory is writable: the root file system
	// is read-only. The container runs as root: its default is root's.
	control := cfg.Admin.Control
	if cfg.Admin.ControlLine() == 0 {
		control = config.DefaultAdminControl
	}
	if control != "" {
		writable := false
		for _, vm := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && vm.MountPath == path.Dir(control) && v.EmptyDir != nil {
					writable = true
				}
			}
		}
		if !writable {
			t.Errorf("the control socket %s: its directory is no emptyDir mounted (the root file system is read-only)", control)
		}
	}

	// The probes reach the admin server: readiness on /healthz (a leg a
	// route needs is down), liveness on /livez (the watchdog's check: a
	// peer gateway away must not restart the pod).
	for _, pr := range []struct {
		name, path string
		p          probe
	}{{"readiness", "/healthz", c.ReadinessProbe}, {"liveness", "/livez", c.LivenessProbe}} {
		a := cfg.Admin.Addr()
		if pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Host != a.Addr().String() || pr.p.HTTPGet.Port != int(a.Port()) {
			t.Errorf("%s probe %+v: want %s on the admin server's %v", pr.name, pr.p.HTTPGet, pr.path, a)
		}
	}

	// The capabilities are the systemd unit's, and nothing else.
	unit := unitCapabilities(t)
	add := append([]string(nil), c.SecurityContext.Capabilities.Add...)
	slices.Sort(add)
	if !slices.Equal(add, unit) || !slices.Equal(c.SecurityContext.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities add %v drop %v: want the unit's %v, and ALL dropped", add, c.SecurityContext.Capabilities.Drop, unit)
	}
}

// unitCapabilities is dist/rbridge.service's bounding set, without CAP_.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("../dist/rbridge.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.TrimPrefix(c, "CAP_"))
			}
			slices.Sort(caps)
			return caps
		}
	}
	t.Fatal("dist/rbridge.service has no CapabilityBoundingSet")
	return nil
}

// TestContainerfile: the image builds the command with the Go go.mod asks
// for and runs it.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var goVersion string
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			parts := strings.Split(v, ".")
			if len(parts) >= 2 {
				goVersion = parts[0] + "." + parts[1]
			}
		}
	}
	if _, err := strconv.ParseFloat(goVersion, 64); err != nil {
		t.Fatalf("go.mod's go directive %q", goVersion)
	}
	s := string(b)
	for _, want := range []string{"golang:" + goVersion + "-", "go build -trimpath -o /out/rbridge ./cmd/rbridge", `ENTRYPOINT ["/usr/local/bin/rbridge"]`, "ibverbs-providers"} {
		if !strings.Contains(s, want) {
			t.Errorf("deploy/Containerfile lacks %q", want)
		}
	}
}
