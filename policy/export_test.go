package policy

// EncodeInputFor is the input document the Decider hands engine for in:
// in reduced to what engine's policy reads (see inputFields).
func EncodeInputFor(engine Engine, in Input) ([]byte, error) {
	return (&Decider{engine: engine}).fieldsOf().encode(&in)
}
