package transport

// roomFor returns q with room for n more elements at its end. A queue
// popped from its front (q = q[1:]) and appended to at its end loses its
// array's front with each pop; kept full, as a send queue under a window
// is, it took a new array each time its end reached the array's (an
// allocation every few dozen posts). Here q moves back to the front of the
// array it lies in, *arr, while that holds twice what q then needs; a
// larger array is made only when it does not. q must lie in *arr, or be
// empty. What *arr holds past q is cleared: nothing popped stays
// reachable from it.
func roomFor[T any](q []T, arr *[]T, n int) []T {
	if cap(q)-len(q) >= n {
		return q
	}
	need := len(q) + n
	if 2*need > len(*arr) {
		a := make([]T, max(2*need, 16))
		k := copy(a, q)
		*arr = a
		return a[:k]
	}
	k := copy(*arr, q)
	clear((*arr)[k:])
	return (*arr)[:k]
}
