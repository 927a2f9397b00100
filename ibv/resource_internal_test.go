package ibv

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

// A fake verbs tree (device -> pd -> mr, qp; device -> cq -> qp) closed in
// every order: each object is freed once, after its dependents, and the
// live counts return to zero.
func TestResourceCloseAnyOrder(t *testing.T) {
	names := []string{"dev", "pd", "cq", "mr", "qp"}
	orders := permutations(names)
	for _, order := range orders {
		var freed []string
		mk := func(r *resource, kind objKind, name string, parents ...*resource) {
			t.Helper()
			err := r.create(kind, parents, func() (func() error, error) {
				return func() error {
					freed = append(freed, name)
					return nil
				}, nil
			})
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
		}
		var dev, pd, cq, mr, qp resource
		mk(&dev, kindDevice, "dev")
		mk(&pd, kindPD, "pd", &dev)
		mk(&cq, kindCQ, "cq", &dev)
		mk(&mr, kindMR, "mr", &pd)
		mk(&qp, kindQP, "qp", &pd, &cq)
		byName := map[string]*resource{"dev": &dev, "pd": &pd, "cq": &cq, "mr": &mr, "qp": &qp}
		for _, n := range order {
			if err := byName[n].close(); err != nil {
				t.Fatalf("order %v: close %s: %v", order, n, err)
			}
			if err := byName[n].close(); err != nil {
				t.Fatalf("order %v: second close %s: %v", order, n, err)
			}
		}
		pos := func(n string) int { return slices.Index(freed, n) }
		for _, e := range [][2]string{{"mr", "pd"}, {"qp", "pd"}, {"qp", "cq"}, {"pd", "dev"}, {"cq", "dev"}} {
			if pos(e[0]) > pos(e[1]) {
				t.Errorf("order %v: %s freed before its dependent %s (%v)", order, e[1], e[0], freed)
			}
		}
		slices.Sort(freed)
		if want := []string{"cq", "dev", "mr", "pd", "qp"}; !slices.Equal(freed, want) {
			t.Errorf("order %v: freed %v, want each once", order, freed)
		}
		if m := LiveObjects(); len(m) != 0 {
			t.Fatalf("order %v: live %v", order, m)
		}
	}
}

func TestResourceClosedParent(t *testing.T) {
	var dev, pd resource
	noop := func() (func() error, error) { return func() error { return nil }, nil }
	if err := dev.create(kindDevice, nil, noop); err != nil {
		t.Fatal(err)
	}
	dev.close()
	if err := pd.create(kindPD, []*resource{&dev}, noop); !errors.Is(err, ErrClosed) {
		t.Errorf("create under a closed parent: %v, want ErrClosed", err)
	}
	if err := dev.acquire(); !errors.Is(err, ErrClosed) {
		t.Errorf("acquire after close: %v, want ErrClosed", err)
	}
}

// Operations racing with Close either finish before the free or fail with
// ErrClosed; none runs after it (run with -race).
func TestResourceCloseRace(t *testing.T) {
	var r resource
	var mu sync.Mutex
	freed := false
	r.create(kindCQ, nil, func() (func() error, error) {
		return func() error { mu.Lock(); freed = true; mu.Unlock(); return nil }, nil
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := r.acquire(); err != nil {
					return
				}
				mu.Lock()
				f := freed
				mu.Unlock()
				r.op.RUnlock()
				if f {
					t.Error("operation ran after free")
					return
				}
			}
		}()
	}
	r.close()
	wg.Wait()
}

func permutations(s []string) [][]string {
	if len(s) <= 1 {
		return [][]string{slices.Clone(s)}
	}
	var out [][]string
	for i := range s {
		rest := slices.Concat(s[:i:i], s[i+1:])
		for _, p := range permutations(rest) {
			out = append(out, append([]string{s[i]}, p...))
		}
	}
	return out
}
