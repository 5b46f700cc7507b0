package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fencelock/fencelock/internal/acl"
	"github.com/fencelock/fencelock/internal/locktable"
)

var sampleCommands = []Command{
	{Op: OpAcquire, Now: 5, Key: "k", Holder: "h", TTL: 10},
	{Op: OpAcquire, RequestID: "req-1", Now: -3, Key: "a/b", Holder: "alice", TTL: locktable.Second},
	{Op: OpRenew, Now: 7, Key: "k", Holder: "h", TTL: 20},
	{Op: OpWait, Now: 1, Key: "k", Holder: "h", TTL: 10, Deadline: 99},
	{Op: OpCancelWait, Now: 2, Key: "k", Holder: "h"},
	{Op: OpRelease, Now: 3, Key: "k", Holder: "h"},
	{Op: OpRelease, Now: 3, Key: "k", Holder: "h", Token: 1 << 60},
	{Op: OpExtend, Now: 4, Key: "k", Holder: "h", Token: 9, TTL: 30},
	{Op: OpExtendBatch, Now: 4, Holder: "h", TTL: 30, Items: []Item{{Key: "a", Token: 1}, {Key: "b", Token: 2}}},
	{Op: OpTick, Now: 1 << 40},
	{Op: OpCancelWaits, Now: 8, Items: []Item{{Key: "a", Holder: "x"}, {Key: "b", Holder: "y"}}},
	{Op: OpAcquire, Now: 0, Key: strings.Repeat("k", locktable.MaxKeyLen), Holder: strings.Repeat("h", locktable.MaxHolderLen), TTL: 1},
	{Op: OpMember, RequestID: "m", Now: 9, NodeID: "n1", RaftAddr: "127.0.0.1:7471", ClientAddr: "127.0.0.1:7470"},
	{Op: OpClusterID, Now: 10, ClusterID: "7f3a9c"},
	{Op: OpTokenFloor, Now: 11, Token: 1 << 50},
	{Op: OpWait, Now: 12, Key: "w", Holder: "h", TTL: 100, Deadline: 200, MaxKeyWaiters: 1000, MaxWaiters: 100000},
	{Op: OpWait, Now: 12, Key: "w", Holder: "h", TTL: 100, Deadline: 200, MaxWaiters: MaxWaitLimit},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLBootstrap, Principal: acl.Principal{TokenHash: acl.HashToken("s")}}},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLSetPrincipal, Replace: true,
		Principal: acl.Principal{Name: "ci", Policies: []string{"jobs", "read"}, TokenHash: acl.HashToken("t")}}},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLSetPrincipal, Principal: acl.Principal{Name: "node1"}}},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLDeletePrincipal, Name: "ci"}},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLSetPolicy, Policy: acl.Policy{Name: "jobs",
		Rules: []acl.Rule{{Prefix: "jobs/", Verbs: acl.Lock | acl.Read}, {Prefix: "jobs/secret/", Verbs: acl.Read, Deny: true}}}}},
	{Op: OpACL, Now: 12, ACL: &ACLChange{Kind: ACLDeletePolicy, Name: "jobs"}},
	{Op: OpShared, Now: 13, Key: "pool", Holder: "h", TTL: 10, Shared: locktable.Shared{Kind: locktable.Semaphore, Permits: 3}},
	{Op: OpShared, RequestID: "r", Now: 13, Key: "rw", Holder: "h", TTL: 10, Deadline: 50,
		Shared: locktable.Shared{Kind: locktable.ReadWrite, Write: true}, MaxKeyWaiters: 4, MaxWaiters: 8},
	// A principal's share of a key's queue (issue 41): alone, and after
	// the brackets before it, zero or not.
	{Op: OpWait, Now: 14, Key: "w", Holder: "h", TTL: 100, Deadline: 200, MaxOwnerKeyWaiters: 250},
	{Op: OpWait, Now: 14, Key: "w", Holder: "h", TTL: 100, Deadline: 200, MaxKeyWaiters: 1000, MaxWaiters: 100000, MaxOwnerKeyWaiters: 250},
	{Op: OpWait, Now: 14, Key: "w", Holder: "h", TTL: 100, Deadline: 200, MaxKeyWaiters: 1000, Session: 3, LockDelay: 5, MaxOwnerKeyWaiters: 1},
	{Op: OpShared, Now: 14, Key: "pool", Holder: "h", TTL: 10, Deadline: 50, Shared: locktable.Shared{Kind: locktable.Semaphore, Permits: 3}, MaxOwnerKeyWaiters: 2},
	// Marked by a leader that keeps the request-id memory by owner.
	{Op: OpTick, Now: 15, ByOwner: true},
	{Op: OpRenew, RequestID: "r", Now: 15, Key: "k", Holder: "h", TTL: 20, ByOwner: true},
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range sampleCommands {
		t.Run(c.Op.String(), func(t *testing.T) {
			b, err := Encode(c)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if b[0]&^byOwnerBit != byte(c.Op) || (b[0]&byOwnerBit != 0) != c.ByOwner {
				t.Fatalf("first byte %d, want the op %d", b[0], c.Op)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, c) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	many := make([]Item, MaxBatch+1)
	for _, c := range []Command{
		{},
		{Op: opLimit},
		{Op: 21}, {Op: 24}, // kept for shared locks, not yet used
		{Op: OpAcquire, RequestID: strings.Repeat("r", MaxRequestIDLen+1)},
		{Op: OpAcquire, Key: strings.Repeat("k", locktable.MaxKeyLen+1)},
		{Op: OpAcquire, Holder: strings.Repeat("h", locktable.MaxHolderLen+1)},
		{Op: OpExtendBatch, Items: many},
		{Op: OpExtendBatch, Items: []Item{{Key: strings.Repeat("k", locktable.MaxKeyLen+1)}}},
		{Op: OpWait, MaxKeyWaiters: -1},
		{Op: OpWait, MaxWaiters: MaxWaitLimit + 1},
		{Op: OpAcquire, MaxKeyWaiters: 1},
		{Op: OpAcquire, MaxOwnerKeyWaiters: 1},
		{Op: OpWait, MaxOwnerKeyWaiters: -1},
		{Op: OpACL},
		{Op: OpACL, ACL: &ACLChange{Kind: ACLBootstrap}},
		{Op: OpACL, ACL: &ACLChange{Kind: ACLSetPrincipal, Principal: acl.Principal{Name: "a/b"}}},
		{Op: OpACL, ACL: &ACLChange{Kind: ACLSetPolicy, Policy: acl.Policy{Name: "p", Rules: []acl.Rule{{Prefix: "x"}}}}},
	} {
		if _, err := Encode(c); !errors.Is(err, ErrBadCommand) {
			t.Errorf("Encode(%+v): %v, want ErrBadCommand", c.Op, err)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, _ := Encode(Command{Op: OpExtend, Now: 4, Key: "k", Holder: "h", Token: 9, TTL: 30})
	wait, _ := Encode(Command{Op: OpWait, Now: 4, Key: "k", Holder: "h", TTL: 30, Deadline: 50})
	sem, _ := Encode(Command{Op: OpShared, Now: 4, Key: "k", Holder: "h", TTL: 30, Deadline: 50, Shared: locktable.Shared{Kind: locktable.Semaphore, Permits: 2}})
	cases := map[string][]byte{
		"wait limits both zero":        append(append([]byte{}, wait...), 0, 0),
		"wait limit too big":           append(append([]byte{}, wait...), 1, 0x80, 0x80, 0x80, 0x80, 0x08),
		"wait limits truncated":        append(append([]byte{}, wait...), 1),
		"grant options both zero":      append(append([]byte{}, wait...), 1, 0, 0, 0),
		"owner wait limit zero":        append(append([]byte{}, wait...), 1, 0, 0, 0, 0),
		"owner wait limit too big":     append(append([]byte{}, wait...), 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x08),
		"shared owner wait limit zero": append(append([]byte{}, sem...), 0, 0, 0),
		"shared wait limits both zero": append(append([]byte{}, sem...), 0, 0),
		"op 0 marked by owner":         {byOwnerBit, 0, 0},
		"op 21, kept":                  {21, 0, 0},
		"op 21 marked by owner":        {byOwnerBit | 21, 0, 0},
		"empty":                        nil,
		"op 0":                         {0},
		"op 200":                       {200, 0, 0},
		"truncated":                    good[:len(good)-1],
		"trailing":                     append(append([]byte{}, good...), 0),
		"long id":                      append([]byte{byte(OpTick), MaxRequestIDLen + 1}, bytes.Repeat([]byte{'x'}, MaxRequestIDLen+1)...),
		"big batch":                    {byte(OpCancelWaits), 0, 0, 0xff, 0xff, 0x03},
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%s: Decode = %v, want ErrBadCommand", name, err)
		}
	}
}

// FuzzDecode: Decode never panics, refuses with ErrBadCommand, and whatever
// it accepts re-encodes to bytes that decode to the same command.
func FuzzDecode(f *testing.F) {
	for _, c := range sampleCommands {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{byte(OpExtendBatch), 0, 0, 1, 0, 200, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not match ErrBadCommand", err)
			}
			return
		}
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", c, err)
		}
		again, err := Decode(b)
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-decoding %x: %+v, %v; want %+v", b, again, err, c)
		}
	})
}
