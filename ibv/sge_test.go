package ibv_test

import "github.com/rbridge/rbridge/ibv"

// mustSGE is mr's span [off, off+n) for a test that built the span
// itself: one outside mr is the test's own bug.
func mustSGE(mr *ibv.MR, off, n int) ibv.SGE {
	s, err := mr.SGE(off, n)
	if err != nil {
		panic(err)
	}
	return s
}
