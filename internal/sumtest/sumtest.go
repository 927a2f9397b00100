// Package sumtest checks the Add methods of rbridge's counter snapshots:
// that they sum every counter, so one added later is not forgotten.
package sumtest

import (
	"fmt"
	"reflect"
	"testing"
)

// CheckAdd adds a T whose counters (uint64 fields, in nested structs and
// arrays) are all 1 to a zero T twice with add, and fails t naming each
// counter that does not read 2: one add left out.
func CheckAdd[T any](t testing.TB, add func(dst *T, src T)) {
	t.Helper()
	var one, got T
	setOnes(reflect.ValueOf(&one).Elem())
	add(&got, one)
	add(&got, one)
	check(t, reflect.ValueOf(got), reflect.TypeOf(got).Name())
}

func setOnes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				setOnes(v.Field(i))
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			setOnes(v.Index(i))
		}
	case reflect.Uint64:
		v.SetUint(1)
	}
}

func check(t testing.TB, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				check(t, v.Field(i), path+"."+f.Name)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			check(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Uint64:
		if v.Uint() != 2 {
			t.Errorf("Add missed %s: %d after adding 1 twice, want 2", path, v.Uint())
		}
	}
}
