package transport_test

import (
	"reflect"
	"testing"

	"github.com/rbridge/rbridge/roce/transport"
)

// fillOnes sets every number in v (a struct of counters and arrays of
// them) to 1.
func fillOnes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillOnes(v.Field(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			fillOnes(v.Index(i))
		}
	case reflect.Uint64:
		v.SetUint(1)
	}
}

// TestStatsSnapshotAdd: Add sums every counter (a field it forgot would
// read as 1).
func TestStatsSnapshotAdd(t *testing.T) {
	var one, got, want transport.StatsSnapshot
	fillOnes(reflect.ValueOf(&one).Elem())
	got.Add(one)
	got.Add(one)
	want.Add(one)
	fillOnes(reflect.ValueOf(&want).Elem())
	want.Add(one)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Add missed a counter:\n got %+v\nwant %+v", got, want)
	}
}
