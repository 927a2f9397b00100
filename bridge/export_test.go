package bridge

// SetBeforeSession sets what g calls as each session is about to enter
// its table, both its connections made (before the gateway serves
// connections: set it right after StartGateway).
func SetBeforeSession(g *Gateway, f func()) { g.beforeSession.Store(&f) }

// LinkDown is why the link watch has leg name down (nil: it has it up).
func LinkDown(g *Gateway, name string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.linkDown[name]
}
