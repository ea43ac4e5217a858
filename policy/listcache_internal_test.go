package policy

import (
	"reflect"
	"testing"
)

// sameContext compares the context of an input field by field: a field
// added to Input, Principal, Server or Confinement must be added there (or
// to the item key) too, or inputs differing only in it would share a key.
func TestSameContextKnowsEveryField(t *testing.T) {
	for typ, fields := range map[reflect.Type]int{
		reflect.TypeFor[Input]():       10,
		reflect.TypeFor[Tool]():        6,
		reflect.TypeFor[Resource]():    4,
		reflect.TypeFor[Prompt]():      3,
		reflect.TypeFor[Principal]():   4,
		reflect.TypeFor[Server]():      5,
		reflect.TypeFor[Confinement](): 17,
	} {
		if typ.NumField() != fields {
			t.Errorf("%s has %d fields, sameContext and itemKeyOf know %d: update them and this test", typ, typ.NumField(), fields)
		}
	}
}
