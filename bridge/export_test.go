package bridge

// SetBeforeTable sets what g calls as each session or UD client's pair
// is about to enter its table, its connections made.
func SetBeforeTable(g *Gateway, f func()) { g.beforeTable.Store(&f) }

// CrossesDown is why the link watch has leg name down, or its floating
// address gone (nil: neither).
func CrossesDown(g *Gateway, name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.crossesDownLocked(name)
	return err
}
