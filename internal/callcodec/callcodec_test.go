package callcodec

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/api"
)

func TestRoundTrips(t *testing.T) {
	acq := api.AcquireRequest{Key: "k/é", Holder: "h", TTLMs: 5000, WaitMs: -1, RequestID: "r1", Session: 1 << 40,
		LockDelayMs: 250, Permits: -3, Mode: "read"}
	if got, err := Acquire(AppendAcquire(nil, acq)); err != nil || got != acq {
		t.Fatalf("acquire: %+v %v", got, err)
	}
	ext := api.ExtendRequest{Key: "k", Holder: "h", Token: 1<<64 - 1, TTLMs: -1 << 63, RequestID: "x"}
	if got, err := Extend(AppendExtend(nil, ext)); err != nil || got != ext {
		t.Fatalf("extend: %+v %v", got, err)
	}
	rel := api.ReleaseRequest{Key: "k", Holder: "h", Token: 7}
	if got, err := Release(AppendRelease(nil, rel)); err != nil || got != rel {
		t.Fatalf("release: %+v %v", got, err)
	}
	chk := CheckRequest{Key: "k", Token: 9}
	if got, err := Check(AppendCheck(nil, chk)); err != nil || got != chk {
		t.Fatalf("check: %+v %v", got, err)
	}
	l := api.Lease{Key: "s", Holder: "a", Token: 3, TTLMs: 1000, RemainingMs: 999, Session: 2, Kind: "semaphore", Permits: 2, Slot: 1,
		Holders: []api.Lease{{Key: "s", Holder: "a", Token: 3, Slot: 1}, {Key: "s", Holder: "b", Token: 4, Slot: 2, Mode: "read"}}}
	if got, err := Lease(AppendLease(nil, l)); err != nil || !reflect.DeepEqual(got, l) {
		t.Fatalf("lease: %+v %v", got, err)
	}
	for _, v := range []bool{true, false} {
		if got, err := Released(AppendReleased(nil, api.ReleaseResponse{Released: v})); err != nil || got.Released != v {
			t.Fatalf("released %v: %+v %v", v, got, err)
		}
	}
	c := api.CheckResponse{Key: "k", Token: 5, Valid: true}
	if got, err := Checked(AppendChecked(nil, c)); err != nil || got != c {
		t.Fatalf("checked: %+v %v", got, err)
	}
}

func TestRefusals(t *testing.T) {
	good := AppendRelease(nil, api.ReleaseRequest{Key: "k", Holder: "h", Token: 1})
	nested := AppendLease(nil, api.Lease{Key: "k", Holders: []api.Lease{{Key: "k", Holders: []api.Lease{{Key: "k"}}}}})
	huge := AppendLease(nil, api.Lease{Key: "k"})
	huge = append(huge[:len(huge)-1], 0xff, 0xff, 0xff, 0x7f) // a count of holders far past the body
	cases := map[string]struct {
		err   error
		field string
	}{
		"short":      {func() error { _, err := Release(good[:3]); return err }(), "holder"},
		"trailing":   {func() error { _, err := Release(append(good, 1)); return err }(), "body"},
		"not utf-8":  {func() error { _, err := Release(AppendRelease(nil, api.ReleaseRequest{Key: "\xc3"})); return err }(), "key"},
		"long str":   {func() error { _, err := Check([]byte{0x7f, 'k'}); return err }(), "key"},
		"bad bool":   {func() error { _, err := Released([]byte{2}); return err }(), "released"},
		"nested":     {func() error { _, err := Lease(nested); return err }(), "holders"},
		"huge count": {func() error { _, err := Lease(huge); return err }(), "holders"},
		"overflow": {func() error {
			_, err := Check(append([]byte{1, 'k'}, []byte(strings.Repeat("\xff", 11))...))
			return err
		}(), "token"},
	}
	for name, c := range cases {
		var e *Error
		if !errors.As(c.err, &e) || e.Field != c.field {
			t.Errorf("%s: %v, want an error on %q", name, c.err, c.field)
		}
	}
}

// Whatever a peer sends, decoding returns an answer or an error, and
// what decodes encodes back to the same bytes.
func FuzzLease(f *testing.F) {
	f.Add(AppendLease(nil, api.Lease{Key: "k", Holder: "h", Token: 1, Holders: []api.Lease{{Key: "k"}}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := Lease(b)
		if err != nil {
			return
		}
		if again := AppendLease(nil, l); string(again) != string(b) {
			// Varints have one shortest form; a longer one decodes
			// too, so compare by value.
			l2, err := Lease(again)
			if err != nil || !reflect.DeepEqual(l, l2) {
				t.Fatalf("%x decoded to %+v, which encodes to %x (%+v, %v)", b, l, again, l2, err)
			}
		}
	})
}

func FuzzAcquire(f *testing.F) {
	f.Add(AppendAcquire(nil, api.AcquireRequest{Key: "k", Holder: "h", TTLMs: 1000, Mode: "write"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := Acquire(b)
		if err != nil {
			return
		}
		if q2, err := Acquire(AppendAcquire(nil, q)); err != nil || q2 != q {
			t.Fatalf("%x: %+v then %+v %v", b, q, q2, err)
		}
	})
}
