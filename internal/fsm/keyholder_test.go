package fsm

import (
	"reflect"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/locktable"
)

// The ops whose key and holder are decoded into one string round-trip
// every length of either, empty and at the limits included (a length
// prefix of two bytes between them too).
func TestKeyHolderRoundTrip(t *testing.T) {
	lens := []int{0, 1, 127, 128, locktable.MaxKeyLen}
	for _, kl := range lens {
		for _, hl := range []int{0, 1, 127, 128, locktable.MaxHolderLen} {
			k, h := strings.Repeat("k", kl), strings.Repeat("h", hl)
			for _, c := range []Command{
				{Op: OpAcquire, RequestID: "id", Now: 3, Key: k, Holder: h, TTL: 9},
				{Op: OpRenew, Key: k, Holder: h, TTL: 9},
				{Op: OpWait, Key: k, Holder: h, TTL: 9, Deadline: 20, MaxWaiters: 2},
				{Op: OpCancelWait, Key: k, Holder: h},
				{Op: OpRelease, Key: k, Holder: h, Token: 300},
				{Op: OpExtend, Key: k, Holder: h, Token: 1, TTL: 2},
				{Op: OpShared, Key: k, Holder: h, TTL: 9, Shared: sem3},
				{Op: OpCancelWaits, Items: []Item{{Key: k, Holder: h}, {Key: "x" + k[min(1, kl):], Holder: h}}},
			} {
				b, err := Encode(c)
				if err != nil {
					t.Fatalf("%s %d/%d: %v", c.Op, kl, hl, err)
				}
				if got, err := Decode(b); err != nil || !reflect.DeepEqual(got, c) {
					t.Fatalf("%s %d/%d: decoded %+v %v", c.Op, kl, hl, got, err)
				}
			}
		}
	}
}
