package xdp_test

import (
	"reflect"
	"testing"

	"github.com/rbridge/rbridge/xdp"
)

// TestConnStatsAdd: Add sums every counter (a field it forgot would read
// as 1).
func TestConnStatsAdd(t *testing.T) {
	var one, got xdp.ConnStats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		v.Field(i).SetUint(1)
	}
	got.Add(one)
	got.Add(one)
	g := reflect.ValueOf(got)
	for i := range g.NumField() {
		if g.Field(i).Uint() != 2 {
			t.Errorf("Add missed %s: %d, want 2", g.Type().Field(i).Name, g.Field(i).Uint())
		}
	}
}
