package guest_test

import (
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
)

// On the host, every entry point skips with the reason that names `make integration`.
func TestSkipsOnHost(t *testing.T) {
	if guest.InGuest() {
		t.Skip("checks the host behaviour; this is the guest")
	}
	for name, call := range map[string]func(testing.TB){
		"Device":      func(t testing.TB) { guest.Device(t) },
		"RequireKind": func(t testing.TB) { guest.RequireKind(t, "rxe") },
		"UserNetns":   func(t testing.TB) { guest.UserNetns(t) },
	} {
		var inner *testing.T
		t.Run(name, func(t *testing.T) {
			inner = t
			call(t)
			t.Errorf("%s returned on the host instead of skipping", name)
		})
		if !inner.Skipped() {
			t.Errorf("%s did not skip on the host", name)
		}
	}
}

// In the guest, RequireKind skips the other kind's pass and returns this pass's device.
func TestRequireKindInGuest(t *testing.T) {
	d := guest.Device(t)
	other := map[string]string{"rxe": "siw", "siw": "rxe"}[d.Kind]
	var inner *testing.T
	t.Run("other kind", func(t *testing.T) {
		inner = t
		guest.RequireKind(t, other)
		t.Errorf("RequireKind(%q) returned in the %s pass", other, d.Name)
	})
	if !inner.Skipped() {
		t.Errorf("RequireKind(%q) did not skip in the %s pass", other, d.Name)
	}
	if got := guest.RequireKind(t, d.Kind); got.Name != d.Name {
		t.Errorf("RequireKind(%q).Name = %q, want %q", d.Kind, got.Name, d.Name)
	}
}
