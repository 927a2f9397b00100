package harness

import "testing"

func TestKey(t *testing.T) {
	base := Key("base", "6.1.0-57-amd64", "script")
	if again := Key("base", "6.1.0-57-amd64", "script"); again != base {
		t.Errorf("Key is not stable: %s then %s", base, again)
	}
	if len(base) != 16 {
		t.Errorf("Key length %d, want 16 hex digits", len(base))
	}
	for name, other := range map[string]string{
		"kernel":          Key("base", "6.1.0-58-amd64", "script"),
		"script":          Key("base", "6.1.0-57-amd64", "script2"),
		"bytes moved":     Key("base", "6.1.0-57-amd64s", "cript"),
		"part added":      Key("base", "6.1.0-57-amd64", "script", ""),
		"parts reordered": Key("base", "script", "6.1.0-57-amd64"),
	} {
		if other == base {
			t.Errorf("Key unchanged when the %s changes", name)
		}
	}
}

func TestRunConfigQuoting(t *testing.T) {
	got := RunConfig{Run: `TestA|Test'B$`, TestTimeout: "5m0s", Baseline: true}.script()
	want := "RUN='TestA|Test'\\''B$'\nBENCH=''\nBENCHTIME='1s'\nCOUNT=1\nTEST_TIMEOUT='5m0s'\nBASELINE=1\n"
	if got != want {
		t.Errorf("script() = %q, want %q", got, want)
	}
}

func TestRunConfigEnv(t *testing.T) {
	got := RunConfig{TestTimeout: "5m0s", Env: []string{"RBRIDGE_SOAK=10m", "A_B='x y'"}}.script()
	want := "RUN=''\nBENCH=''\nBENCHTIME='1s'\nCOUNT=1\nTEST_TIMEOUT='5m0s'\nBASELINE=0\nexport RBRIDGE_SOAK='10m'\nexport A_B=''\\''x y'\\'''\n"
	if got != want {
		t.Errorf("script() = %q, want %q", got, want)
	}
	for _, bad := range []string{"NOEQUALS", "=v", "1A=v", "A-B=v", "A B=v", "$(x)=v"} {
		if err := CheckEnv([]string{bad}); err == nil {
			t.Errorf("CheckEnv(%q) = nil, want an error", bad)
		}
	}
	if err := CheckEnv([]string{"RBRIDGE_SOAK=10m", "X=", "_a1=b=c"}); err != nil {
		t.Errorf("CheckEnv of good pairs: %v", err)
	}
}

func TestPackageID(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/rbridge/rbridge/ibv":               "ibv",
		"github.com/rbridge/rbridge/roce/engine":       "roce_engine",
		"github.com/rbridge/rbridge":                   "rbridge",
		"github.com/rbridge/rbridge/integration/guest": "integration_guest",
		"github.com/rbridge/rbridge/x/we!rd name":      "x_we_rd_name",
	} {
		if got := PackageID(in); got != want {
			t.Errorf("PackageID(%q) = %q, want %q", in, got, want)
		}
	}
}
