package policy

import "sync"

// callCacheMaxEntries bounds the call cache; when full it is cleared, as
// the exposure cache is. An entry is a 32-byte key and a Decision.
const callCacheMaxEntries = 10_000

// callCache holds the decisions of Decide (tools/call, resources/read,
// prompts/get and other single decisions) by the sha256 of the input
// reduced to what the policy reads: two inputs with the same reduced
// encoding are the same question to the policy, which, being cacheable,
// reads nothing that differs between two identical requests and calls no
// non-deterministic builtin. It belongs to one Decider, i.e. one policy
// revision and one data document. Decisions that came with an error are
// not kept: the next request evaluates again.
type callCache struct {
	mu sync.RWMutex
	m  map[[32]byte]Decision
}

func newCallCache() *callCache { return &callCache{m: map[[32]byte]Decision{}} }

func (c *callCache) lookup(key [32]byte) (Decision, bool) {
	c.mu.RLock()
	dec, ok := c.m[key]
	c.mu.RUnlock()
	return dec, ok
}

func (c *callCache) store(key [32]byte, dec Decision) {
	c.mu.Lock()
	if len(c.m) >= callCacheMaxEntries {
		clear(c.m)
	}
	c.m[key] = dec
	c.mu.Unlock()
}
