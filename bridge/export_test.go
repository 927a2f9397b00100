package bridge

// SetBeforeTable sets what g calls as each session or UD client's pair
// is about to enter its table, its connections made.
func SetBeforeTable(g *Gateway, f func()) { g.beforeTable.Store(&f) }

// LinkDown is why the link watch has leg name down (nil: it has it up).
func LinkDown(g *Gateway, name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.linkDown[name]
}
