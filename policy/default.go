package policy

import _ "embed"

//go:embed default.json
var defaultJSON []byte

// Default returns the default policy (policy/default.json): every field at
// its zero value, which enforces everything. It rejects all evidence until
// measurement and source-hash allowlists are added.
func Default() *Policy {
	p, err := Parse(defaultJSON)
	if err != nil {
		panic("policy: embedded default.json does not parse: " + err.Error())
	}
	return p
}
