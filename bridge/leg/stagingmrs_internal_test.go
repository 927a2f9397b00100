package leg

import (
	"errors"
	"slices"
	"testing"
)

// fakeReg is a registration of the regCache tests: which bytes, and the
// how-manyth made.
type fakeReg struct {
	id int
	b  []byte
}

// regLog makes and releases fakeRegs, keeping what was released.
type regLog struct {
	made     int
	released []int
	fail     error
}

func (l *regLog) cache(max int) *regCache[*fakeReg] {
	return newRegCache(max, func(b []byte) (*fakeReg, error) {
		if l.fail != nil {
			return nil, l.fail
		}
		l.made++
		return &fakeReg{id: l.made, b: b}, nil
	}, func(r *fakeReg) error {
		l.released = append(l.released, r.id)
		return nil
	})
}

// TestRegCacheReuse: a registration handed back is taken again for the
// same extent only (address and length alike), and not while it is out.
func TestRegCacheReuse(t *testing.T) {
	var l regLog
	c := l.cache(8)
	mem := make([]byte, 1<<16)
	a, reused, err := c.get(mem[:4096])
	if err != nil || reused || a.id != 1 {
		t.Fatalf("first get: %v, reused %v, %v", a, reused, err)
	}
	// Out: the same extent again gets one of its own.
	b, reused, _ := c.get(mem[:4096])
	if reused || b.id != 2 {
		t.Fatalf("the same extent while out: registration %d, reused %v; want a new one", b.id, reused)
	}
	if err := c.put(mem[:4096], a); err != nil {
		t.Fatal(err)
	}
	// Kept once per extent: the second of the same extent is given up.
	if err := c.put(mem[:4096], b); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.released, []int{2}) {
		t.Fatalf("released %v, want [2]: one idle registration per extent", l.released)
	}
	for _, other := range [][]byte{mem[:8192], mem[4096:8192], mem[1 : 4096+1]} {
		r, reused, _ := c.get(other)
		if reused || r.id == 1 {
			t.Errorf("extent [%p, %d): registration %d, reused %v; only [%p, 4096) may take registration 1", &other[0], len(other), r.id, reused, &mem[0])
		}
	}
	r, reused, _ := c.get(mem[:4096])
	if !reused || r.id != 1 {
		t.Errorf("the extent again: registration %d, reused %v; want 1, reused", r.id, reused)
	}
	if l.made != 5 || c.lru.Len() != 0 {
		t.Errorf("%d registrations made, %d idle; want 5, 0", l.made, c.lru.Len())
	}
}

// TestRegCacheBound: past max idle registrations the least recently used
// is given up; close gives up the rest, and any handed back later.
func TestRegCacheBound(t *testing.T) {
	var l regLog
	c := l.cache(2)
	mem := make([]byte, 1<<16)
	ext := func(i int) []byte { return mem[i*4096 : (i+1)*4096] }
	regs := make([]*fakeReg, 4)
	for i := range regs {
		regs[i], _, _ = c.get(ext(i))
	}
	for i := range 3 {
		if err := c.put(ext(i), regs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(l.released, []int{1}) {
		t.Fatalf("released %v, want [1]: the least recently used past 2", l.released)
	}
	if r, reused, _ := c.get(ext(1)); !reused || r.id != 2 {
		t.Errorf("extent 1: registration %d, reused %v; want 2, reused", r.id, reused)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(l.released, []int{1, 3}) {
		t.Errorf("released %v after close, want [1 3]", l.released)
	}
	c.put(ext(3), regs[3])
	c.put(ext(1), regs[1])
	if !slices.Equal(l.released, []int{1, 3, 4, 2}) {
		t.Errorf("released %v after puts past close, want [1 3 4 2]", l.released)
	}
	if n := c.lru.Len(); n != 0 || len(c.idle) != 0 {
		t.Errorf("%d idle after close (%d by extent), want 0", n, len(c.idle))
	}
}

// TestRegCacheErrors: a failed registration is the caller's error, and
// an extent of no bytes is refused without a registration.
func TestRegCacheErrors(t *testing.T) {
	l := regLog{fail: errors.New("no memory")}
	c := l.cache(2)
	if _, _, err := c.get(make([]byte, 10)); !errors.Is(err, l.fail) {
		t.Errorf("get with the registration failing: %v, want %v", err, l.fail)
	}
	if _, _, err := c.get(nil); err == nil {
		t.Error("get of no bytes: no error")
	}
}
