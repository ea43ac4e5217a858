package policy

// EncodeInputFor is the input document the Decider hands engine for in:
// reduced to what the engine's policy reads, when the engine knows it.
func EncodeInputFor(engine Engine, in Input) ([]byte, error) {
	return NewDecider(engine, nil).fields.encode(&in)
}
