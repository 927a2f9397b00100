package ibv

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// checkBind refuses what the device would refuse late (with an error
// completion that kills the QP) or that would leave the window's key
// unknown.
func TestCheckBind(t *testing.T) {
	const cur = 0x1234_5607
	mr := new(MR)
	ok := MWBind{RKey: 0x1234_5608, MR: mr, Addr: 4096, Length: 8192, Access: AccessRemoteRead | AccessRemoteWrite}
	for _, tc := range []struct {
		name    string
		edit    func(b *MWBind)
		typ     MWType
		pending bool
		wantErr string // "" = accepted
		notSupp bool
	}{
		{name: "ok", edit: func(*MWBind) {}, typ: MWType2},
		{name: "key wraps", edit: func(b *MWBind) { b.RKey = 0x1234_5600 }, typ: MWType2},
		{name: "no MR", edit: func(b *MWBind) { b.MR = nil }, typ: MWType2, wantErr: "no MR"},
		{name: "type 1", edit: func(*MWBind) {}, typ: MWType1, wantErr: "ibv_bind_mw", notSupp: true},
		{name: "pending", edit: func(*MWBind) {}, typ: MWType2, pending: true, wantErr: "a bind is pending"},
		{name: "other index", edit: func(b *MWBind) { b.RKey = 0x1234_5708 }, typ: MWType2, wantErr: "another index"},
		{name: "same key", edit: func(b *MWBind) { b.RKey = cur }, typ: MWType2, wantErr: "the current one"},
		{name: "zero length", edit: func(b *MWBind) { b.Length = 0 }, typ: MWType2, wantErr: "zero length"},
		{name: "MW_BIND access", edit: func(b *MWBind) { b.Access |= AccessMWBind }, typ: MWType2, wantErr: "only remote"},
	} {
		b := ok
		tc.edit(&b)
		err := checkBind(&b, tc.typ, cur, tc.pending)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.wantErr)
		case tc.notSupp != errors.Is(err, ErrNotSupported):
			t.Errorf("%s: %v: errors.Is(ErrNotSupported) = %v, want %v", tc.name, err, !tc.notSupp, tc.notSupp)
		}
	}
}

// A window depends on its PD and on the MR of its latest bind only:
// closing an MR it left does not close it, closing the one it is bound to
// does, first.
func TestResourceDependOn(t *testing.T) {
	var freed []string
	mk := func(r *resource, kind objKind, name string, parents ...*resource) {
		t.Helper()
		err := r.create(kind, parents, func() (func() error, error) {
			return func() error { freed = append(freed, name); return nil }, nil
		})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	var pd, mr1, mr2, mw resource
	mk(&pd, kindPD, "pd")
	mk(&mr1, kindMR, "mr1", &pd)
	mk(&mr2, kindMR, "mr2", &pd)
	mk(&mw, kindMW, "mw", &pd)
	mw.dependOn(&mr1)
	mw.dependOn(&mr1) // again: one edge
	mw.dependOn(&mr2) // moves
	if err := mr1.close(); err != nil {
		t.Fatal(err)
	}
	if mw.isClosed() {
		t.Fatalf("closing mr1 closed the window, which had moved to mr2")
	}
	if err := mr2.close(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"mr1", "mw", "mr2"}; !slices.Equal(freed, want) {
		t.Errorf("freed %v, want %v", freed, want)
	}
	if len(mw.dependsOn) != 0 || len(pd.dependents) != 0 {
		t.Errorf("edges left: window depends on %d, PD has %d dependents", len(mw.dependsOn), len(pd.dependents))
	}
	mw.dependOn(&pd) // closed: nothing
	if err := pd.close(); err != nil {
		t.Fatal(err)
	}
	if m := LiveObjects(); len(m) != 0 {
		t.Fatalf("live %v", m)
	}
}
