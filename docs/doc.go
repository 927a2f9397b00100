// Package docs holds rbridge's documents. The configuration reference,
// configuration.md, is also the binary's (Configuration): `rbridge help
// config` prints it, so the page TestConfigKeysDocumented checks against
// the parser is the one a user reads on a host without the source.
package docs

import _ "embed"

// Configuration is configuration.md: every key of the config file, with
// its type, default, what it applies to and an example, in Markdown.
//
//go:embed configuration.md
var Configuration string
