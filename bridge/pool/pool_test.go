package pool_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
)

func newPool(t *testing.T, o pool.Options) *pool.Pool {
	t.Helper()
	p, err := pool.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func TestPoolClasses(t *testing.T) {
	p := newPool(t, pool.Options{Size: 1 << 20, Classes: []int{256, 4096}})
	t.Logf("arena backing: %s", p.Backing())
	small, err := p.Get(100)
	if err != nil {
		t.Fatal(err)
	}
	big, err := p.Get(3000)
	if err != nil {
		t.Fatal(err)
	}
	if len(small.B()) != 256 || len(big.B()) != 4096 {
		t.Errorf("buffer sizes %d and %d, want 256 and 4096", len(small.B()), len(big.B()))
	}
	// A buffer is a window on the arena at its offset.
	small.B()[0], big.B()[4095] = 0xaa, 0xbb
	a := p.Arena()
	if a[small.Offset()] != 0xaa || a[big.Offset()+4095] != 0xbb {
		t.Errorf("buffers are not views of the arena at their offsets")
	}
	if _, err := p.Get(5000); err == nil {
		t.Errorf("Get(5000) with a largest class of 4096: no error")
	}
	small.Release()
	big.Release()
}

func TestPoolBackpressure(t *testing.T) {
	p := newPool(t, pool.Options{Size: 8 * 4096, Classes: []int{4096}})
	var held []*pool.Buf
	for {
		b, err := p.Get(4096)
		if errors.Is(err, pool.ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	if len(held) != 8 {
		t.Fatalf("got %d buffers from a pool of 8", len(held))
	}
	// GetWait blocks until a release, then gets that buffer.
	got := make(chan *pool.Buf)
	go func() {
		b, err := p.GetWait(context.Background(), 10)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case <-got:
		t.Fatal("GetWait returned while the class was empty")
	case <-time.After(20 * time.Millisecond):
	}
	off := held[3].Offset()
	held[3].Release()
	b := <-got
	if b.Offset() != off {
		t.Errorf("GetWait got offset %d, want the released %d", b.Offset(), off)
	}
	held[3] = b
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := p.GetWait(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GetWait on an empty class with a deadline: %v", err)
	}
	st := p.Stats()[0]
	if st.Free != 0 || st.Exhausted < 2 {
		t.Errorf("stats %+v", st)
	}
	if err := p.Close(); err == nil {
		t.Errorf("Close with buffers held: no error")
	}
	for _, b := range held {
		b.Release()
	}
}

func TestPoolRefcount(t *testing.T) {
	p := newPool(t, pool.Options{Size: 2 * 4096, Classes: []int{4096}})
	b, _ := p.Get(1)
	b.Ref() // a second holder: say, a retransmission queue
	b.Release()
	if p.Stats()[0].Free != 1 {
		t.Fatalf("buffer went back with a reference still held")
	}
	b.Release()
	if p.Stats()[0].Free != 2 {
		t.Fatalf("buffer did not go back after its last release")
	}
	// A release too many is a bug the pool counts, without handing the
	// memory out twice or panicking.
	b.Release()
	st := p.Stats()[0]
	if st.Free != 2 || st.Overreleased != 1 {
		t.Fatalf("after a release too many: %+v, want 2 free and 1 over-release counted", st)
	}
	b2, err := p.Get(1)
	if err != nil {
		t.Fatal(err)
	}
	b3, err := p.Get(1)
	if err != nil || b3 == b2 {
		t.Fatalf("the pool handed out one buffer twice (or failed: %v)", err)
	}
	b2.Release()
	b3.Release()
}

func TestPoolConcurrent(t *testing.T) {
	p := newPool(t, pool.Options{Size: 64 * 1024, Classes: []int{1024}})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				b, err := p.GetWait(context.Background(), 1000)
				if err != nil {
					t.Error(err)
					return
				}
				// Nobody else may hold this buffer: mark it and check.
				mark := byte(g*31 + i)
				for j := range b.B() {
					b.B()[j] = mark
				}
				for j := range b.B() {
					if b.B()[j] != mark {
						t.Errorf("buffer at %d shared by two holders", b.Offset())
						return
					}
				}
				b.Release()
			}
		}()
	}
	wg.Wait()
	if st := p.Stats()[0]; st.Free != st.Total {
		t.Errorf("after the stress: %+v", st)
	}
}

func TestPoolOptionErrors(t *testing.T) {
	for _, o := range []pool.Options{
		{Size: 1 << 20, Classes: []int{4096, 256}},
		{Size: 1 << 20, Classes: []int{1000}},
		{Size: 1000, Classes: []int{4096}},
		{Size: 1 << 20, Classes: []int{}},
		{Size: 1 << 20, Classes: []int{4096}, Reserve: 0.6},
		{Size: 1 << 20, Classes: []int{4096}, Reserve: -0.1},
	} {
		if p, err := pool.New(o); err == nil {
			p.Close()
			t.Errorf("options %+v: no error", o)
		}
	}
}

// TestPoolClosed: after Close the arena is unmapped, and a Get says so
// instead of handing out memory that is no longer there.
func TestPoolClosed(t *testing.T) {
	p, err := pool.New(pool.Options{Size: 2 * 4096, Classes: []int{4096}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if b, err := p.Get(10); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("Get after Close = %v, %v; want ErrClosed", b, err)
	}
	if b, err := p.GetWait(context.Background(), 10); !errors.Is(err, pool.ErrClosed) {
		t.Errorf("GetWait after Close = %v, %v; want ErrClosed", b, err)
	}
}

func BenchmarkPoolGetRelease(b *testing.B) {
	p, err := pool.New(pool.Options{Size: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		buf, err := p.Get(4096)
		if err != nil {
			b.Fatal(err)
		}
		buf.Release()
	}
}

// BenchmarkSyncPoolGetPut is the obvious alternative on the Go heap (which
// a NIC cannot be given): sync.Pool of 4 KiB buffers.
func BenchmarkSyncPoolGetPut(b *testing.B) {
	sp := sync.Pool{New: func() any { return new([4096]byte) }}
	b.ReportAllocs()
	for b.Loop() {
		buf := sp.Get().(*[4096]byte)
		buf[0] = 1
		sp.Put(buf)
	}
}

// BenchmarkPoolParallel is the pool taken from on every P at once (run
// it with -cpu 1,2,...): an op is 8 buffers of 4 KiB taken, then
// released, by Pool.Get (get), by a Frames of each goroutine's own, as
// each receive loop has (frames), and from a sync.Pool on the Go heap,
// the obvious alternative, which keeps a cache per P. ns/op is the wall
// time per op of all the goroutines together: from -cpu 1 to 2 it
// halves where the loops do not meet (sync.Pool's does), and grows
// where they queue on one lock (as the pool's did before its shards).
func BenchmarkPoolParallel(b *testing.B) {
	const held = 8
	newPool := func(b *testing.B) *pool.Pool {
		p, err := pool.New(pool.Options{Size: 64 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		b.SetBytes(held * 4096)
		b.ReportAllocs()
		b.ResetTimer() // the arena's mapping is not an op's
		return p
	}
	b.Run("get", func(b *testing.B) {
		p := newPool(b)
		b.RunParallel(func(pb *testing.PB) {
			var bufs [held]*pool.Buf
			for pb.Next() {
				for i := range bufs {
					x, err := p.Get(4096)
					if err != nil {
						b.Error(err)
						return
					}
					bufs[i] = x
				}
				for _, x := range bufs {
					x.Release()
				}
			}
		})
	})
	b.Run("frames", func(b *testing.B) {
		p := newPool(b)
		b.RunParallel(func(pb *testing.PB) {
			f, err := p.LendFrames(4096, 0.1)
			if err != nil {
				b.Error(err)
				return
			}
			var offs [held]uint64
			for pb.Next() {
				for i := range offs {
					off, ok := f.AllocFrame()
					if !ok {
						b.Error("no frame free")
						return
					}
					offs[i] = off
				}
				for _, off := range offs {
					f.FreeFrame(off)
				}
			}
		})
	})
	b.Run("sync.Pool", func(b *testing.B) {
		sp := sync.Pool{New: func() any { return new([4096]byte) }}
		b.SetBytes(held * 4096)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var bufs [held]*[4096]byte
			for pb.Next() {
				for i := range bufs {
					bufs[i] = sp.Get().(*[4096]byte)
					bufs[i][0] = 1
				}
				for _, x := range bufs {
					sp.Put(x)
				}
			}
		})
	})
}

// TestPoolTraceNamesHolders: with Trace, Close's refusal names the code
// that took and referenced each buffer still held, and not the buffers
// that came back.
func TestPoolTraceNamesHolders(t *testing.T) {
	p, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4096}, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	back, err := p.Get(100)
	if err != nil {
		t.Fatal(err)
	}
	back.Release()
	held := holdOne(t, p)
	err = p.Close()
	if err == nil {
		t.Fatal("Close with a buffer held: no error")
	}
	msg := err.Error()
	t.Log(msg)
	for _, want := range []string{"1 of 256 4096-byte buffers still referenced", "get -> 1:", "ref -> 2:", "release -> 1:", "holdOne"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Close's error does not say %q:\n%s", want, msg)
		}
	}
	if n := strings.Count(msg, "buffer at arena offset"); n != 1 {
		t.Errorf("Close's error describes %d buffers, want the one held:\n%s", n, msg)
	}
	held.Release()
	if err := p.Close(); err != nil {
		t.Fatalf("Close once every buffer is back: %v", err)
	}
}

// holdOne takes a buffer, references it and drops one reference: the
// trace shows all three, from here.
func holdOne(t *testing.T, p *pool.Pool) *pool.Buf {
	b, err := p.Get(100)
	if err != nil {
		t.Fatal(err)
	}
	b.Ref()
	b.Release()
	return b
}

// TestPoolReserve: Get and GetWait leave a class's reserve; GetReserve
// and GetWaitReserve take it; a release wakes a reserve's waiter even
// while a plain waiter, which may not take what came back, waits too.
func TestPoolReserve(t *testing.T) {
	p := newPool(t, pool.Options{Size: 16 * 4096, Classes: []int{4096}, Reserve: 0.25})
	var held []*pool.Buf
	defer func() {
		for _, b := range held {
			b.Release()
		}
	}()
	for {
		b, err := p.Get(4096)
		if err != nil {
			if !errors.Is(err, pool.ErrExhausted) {
				t.Fatal(err)
			}
			break
		}
		held = append(held, b)
	}
	if len(held) != 12 {
		t.Fatalf("Get took %d buffers of 16 with a quarter reserved, want 12", len(held))
	}
	for range 3 {
		b, err := p.GetReserve(4096)
		if err != nil {
			t.Fatalf("GetReserve with the reserve free: %v", err)
		}
		held = append(held, b)
	}
	// One buffer left, in the reserve: a plain waiter and a reserve's
	// waiter wait; the reserve's gets it, the plain one waits on.
	plain := make(chan *pool.Buf, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		b, _ := p.GetWait(ctx, 4096)
		plain <- b
	}()
	time.Sleep(20 * time.Millisecond)
	b, err := p.GetWaitReserve(context.Background(), 4096)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, b)
	// The class is empty: two releases must wake two reserve waiters
	// (one wake-up per release once woke only one of them).
	got := make(chan *pool.Buf, 2)
	for range 2 {
		go func() {
			b, err := p.GetWaitReserve(context.Background(), 4096)
			if err != nil {
				t.Error(err)
			}
			got <- b
		}()
	}
	time.Sleep(20 * time.Millisecond)
	held[0].Release()
	held[1].Release()
	held = held[2:]
	for range 2 {
		select {
		case b := <-got:
			held = append(held, b)
		case <-time.After(5 * time.Second):
			t.Fatal("a reserve's waiter still waits after two releases")
		}
	}
	select {
	case b := <-plain:
		t.Fatalf("GetWait took a buffer of the reserve (%v)", b)
	default:
	}
	// Above the reserve, the plain waiter gets one.
	for _, b := range held[:5] {
		b.Release()
	}
	held = held[5:]
	select {
	case b := <-plain:
		if b == nil {
			t.Fatal("GetWait failed with buffers above the reserve free")
		}
		held = append(held, b)
	case <-time.After(5 * time.Second):
		t.Fatal("GetWait still waits with buffers above the reserve free")
	}
}

// TestLendFrames: frames for a lending conn leave their share of the
// class free (above the reserve, where that is larger); a frame lent with
// references more returns to the pool only after the last; Get still
// finds the buffers the lending left.
func TestLendFrames(t *testing.T) {
	p := newPool(t, pool.Options{Size: 16 * 4096, Classes: []int{4096}, Reserve: 0.125})
	if _, err := p.LendFrames(4096, 1.5); err == nil {
		t.Error("frames that keep 1.5 of their class free: no error")
	}
	if _, err := p.LendFrames(8192, 0.5); err == nil {
		t.Error("frames of a size the pool has no class of: no error")
	}
	f, err := p.LendFrames(4096, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	var offs []uint64
	for {
		off, ok := f.AllocFrame()
		if !ok {
			break
		}
		offs = append(offs, off)
	}
	if len(offs) != 8 {
		t.Fatalf("AllocFrame took %d frames of 16, keeping half free: want 8", len(offs))
	}
	var held []*pool.Buf
	for range 6 { // the other half, less the reserve's two
		b, err := p.Get(4096)
		if err != nil {
			t.Fatalf("Get beside the lent frames: %v", err)
		}
		held = append(held, b)
	}
	// A frame lent twice (two packets), its own reference dropped: it
	// comes back after both packets' references.
	f.RefFrame(offs[0])
	f.RefFrame(offs[0])
	f.FreeFrame(offs[0])
	for _, b := range held {
		b.Release()
	}
	f.FreeFrame(offs[0])
	if b, ok := f.Buf(offs[0]); !ok || b == nil {
		t.Fatal("Buf of a lent frame: none")
	}
	for _, off := range offs[1:] {
		f.FreeFrame(off)
	}
	// One reference left on offs[0]: 15 of 16 free, 8 of them for frames.
	n := 0
	for {
		off, ok := f.AllocFrame()
		if !ok {
			break
		}
		defer f.FreeFrame(off)
		n++
	}
	if n != 7 {
		t.Errorf("with one frame still referenced, AllocFrame took %d, want 7 (15 free, 8 kept)", n)
	}
	f.FreeFrame(offs[0])
}

// shardedPool is a pool of 256 buffers of 1 KiB, made while GOMAXPROCS
// is 16, so that its class is spread over 32 shards (two per P, 8
// buffers each) whatever the CPUs the test runs on.
func shardedPool(t *testing.T, reserve float64) *pool.Pool {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	return newPool(t, pool.Options{Size: 256 * 1024, Classes: []int{1024}, Reserve: reserve})
}

// TestPoolShardsKeepFloors: with the class in many shards, taken from by
// several loops at once, the reserve and a Frames' keep are the class's:
// the Frames of four loops take exactly what is neither kept nor
// reserved, plain Gets what is kept besides, reserve Gets the rest; and
// once every buffer came back, releases have refilled what is held back,
// so the loops take exactly as many again.
func TestPoolShardsKeepFloors(t *testing.T) {
	p := shardedPool(t, 0.25) // 64 reserved
	var frames []*pool.Frames
	for range 4 {
		f, err := p.LendFrames(1024, 0.5) // 128 kept free, the reserve's 64 among them
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	lend := func() (map[*pool.Frames][]uint64, int) {
		offs := map[*pool.Frames][]uint64{}
		var wg sync.WaitGroup
		for _, f := range frames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					off, ok := f.AllocFrame()
					if !ok {
						return
					}
					mu.Lock()
					if seen[off] {
						t.Errorf("frame %d lent twice", off)
					}
					seen[off] = true
					offs[f] = append(offs[f], off)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		n := 0
		for _, o := range offs {
			n += len(o)
		}
		return offs, n
	}
	offs, n := lend()
	if n != 128 {
		t.Fatalf("four loops' Frames took %d of 256 frames, keeping 128 free: want 128", n)
	}
	take := func(reserve bool) []*pool.Buf {
		var got []*pool.Buf
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					var b *pool.Buf
					var err error
					if reserve {
						b, err = p.GetReserve(1024)
					} else {
						b, err = p.Get(1024)
					}
					if errors.Is(err, pool.ErrExhausted) {
						return
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if seen[uint64(b.Offset())] {
						t.Errorf("buffer %d handed out twice", b.Offset())
					}
					seen[uint64(b.Offset())] = true
					got = append(got, b)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return got
	}
	plain := take(false)
	if len(plain) != 64 {
		t.Fatalf("Gets beside the lent frames took %d, want the 64 kept less the reserve", len(plain))
	}
	reserved := take(true)
	if len(reserved) != 64 {
		t.Fatalf("reserve Gets took %d, want the 64 reserved", len(reserved))
	}
	if st := p.Stats()[0]; st.Free != 0 {
		t.Fatalf("every buffer taken: %+v", st)
	}
	var wg sync.WaitGroup
	for _, bs := range [][]*pool.Buf{plain, reserved} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range bs {
				b.Release()
			}
		}()
	}
	for f, o := range offs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, off := range o {
				f.FreeFrame(off)
			}
		}()
	}
	wg.Wait()
	if st := p.Stats()[0]; st.Free != st.Total {
		t.Fatalf("every buffer released: %+v", st)
	}
	clear(seen)
	offs, n = lend()
	if n != 128 {
		t.Errorf("after every buffer came back the loops took %d frames, want 128 again", n)
	}
	for f, o := range offs {
		for _, off := range o {
			f.FreeFrame(off)
		}
	}
}

// TestPoolShardsConcurrent: many shards, many goroutines taking with and
// without the reserve, waiting, and releasing: no buffer is held twice,
// no waiter is left waiting, every buffer comes back.
func TestPoolShardsConcurrent(t *testing.T) {
	p := shardedPool(t, 0.1)
	// A hog takes all it finds free, reserve included, without waiting,
	// then gives it all back, over and over: the others find the class
	// empty and wait for it.
	stop, hogDone := make(chan struct{}), make(chan struct{})
	hogRounds := 0 // each ends in one Get that found the class empty
	go func() {
		defer close(hogDone)
		var held []*pool.Buf
		for {
			select {
			case <-stop:
				return
			default:
			}
			for {
				b, err := p.GetReserve(1024)
				if err != nil {
					break
				}
				held = append(held, b)
			}
			hogRounds++
			time.Sleep(50 * time.Microsecond)
			for _, b := range held {
				b.Release()
			}
			held = held[:0]
		}
	}()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var held []*pool.Buf
			for i := range 3000 {
				var b *pool.Buf
				var err error
				if g%4 == 0 {
					b, err = p.GetWaitReserve(ctx, 1000)
				} else {
					b, err = p.GetWait(ctx, 1000)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mark := byte(g*31 + i)
				for j := range b.B() {
					b.B()[j] = mark
				}
				held = append(held, b)
				// Up to 15 held each: 240 in all, the class's 256 nearly,
				// and 180 by the plain ones, within the 231 not reserved
				// (more, and all could hold while waiting for more).
				if len(held) >= 1+(g+i/50)%15 {
					for _, h := range held {
						if h.B()[0] != h.B()[len(h.B())-1] {
							t.Errorf("buffer at %d written by two holders", h.Offset())
						}
						h.Release()
					}
					held = held[:0]
				}
			}
			for _, h := range held {
				h.Release()
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-hogDone
	st := p.Stats()[0]
	if st.Free != st.Total {
		t.Errorf("after the stress: %+v", st)
	}
	if st.Exhausted <= uint64(hogRounds) {
		t.Errorf("no waiter found the class empty (%d of its hog's %d rounds): the test proved nothing of waiting (%+v)", st.Exhausted, hogRounds, st)
	}
	t.Logf("%+v; the hog's rounds %d", st, hogRounds)
}
