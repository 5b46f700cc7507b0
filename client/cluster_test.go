package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/client/clienttest"
)

func TestMembers(t *testing.T) {
	srv, c := newPair(t, client.SystemClock{})
	m, err := c.Members(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Members) != 1 || m.Leader != m.Node || !m.Members[0].Leader || m.Members[0].ClientAddr != srv.Addr || m.LeaderAddr != srv.Addr {
		t.Fatalf("members of a single node = %+v", m)
	}
	if srv.Count("cluster/members") != 1 {
		t.Fatalf("%d requests, want 1", srv.Count("cluster/members"))
	}
}

// A refusal is an answer: it is not retried, and nothing is uncertain.
func TestJoinRefused(t *testing.T) {
	srv, c := newPair(t, client.SystemClock{})
	_, err := c.Join(context.Background(), "n2", "127.0.0.1:1", "127.0.0.1:2")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Code != api.CodeNoRaft || errors.Is(err, client.ErrChangeUnknown) {
		t.Fatalf("Join on a node without raft = %v, want a no_raft_transport refusal", err)
	}
	if srv.Count("cluster/join") != 1 {
		t.Fatalf("%d requests, want 1", srv.Count("cluster/join"))
	}
	if _, err := c.Remove(context.Background(), "nobody"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrChangeUnknown) {
		t.Fatalf("Remove of no member = %v, want ErrNotFound alone", err)
	}
}

// Join and Remove go to the leader a follower names, as every call does.
func TestJoinFollowsNotLeader(t *testing.T) {
	leader := clienttest.NewServer(client.SystemClock{})
	defer leader.Close()
	follower := clienttest.NewServer(client.SystemClock{})
	defer follower.Close()
	follower.NotLeader(&leader.Addr)
	c, err := client.New([]string{follower.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Join(context.Background(), "n2", "127.0.0.1:1", "127.0.0.1:2")
	if ae := (*client.APIError)(nil); !errors.As(err, &ae) || ae.Code != api.CodeNoRaft {
		t.Fatalf("Join = %v, want the leader's no_raft_transport refusal", err)
	}
	if follower.Count("cluster/join") != 1 || leader.Count("cluster/join") != 1 {
		t.Fatalf("joins: follower %d, leader %d; want 1 and 1", follower.Count("cluster/join"), leader.Count("cluster/join"))
	}
}

// A change whose answer was lost, or that a node answered change_unknown,
// may have been applied: the error says so, besides how it ended.
func TestChangeUnknown(t *testing.T) {
	for _, tc := range []struct {
		fault string
		also  error
	}{
		{"drop", client.ErrUnreachable},
		{api.CodeChangeUnknown, client.ErrUnavailable},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			srv, c := newPair(t, client.SystemClock{}, client.WithRetries(1), client.WithBackoff(time.Millisecond, time.Millisecond))
			srv.Fail("cluster/remove", tc.fault)
			_, err := c.Remove(context.Background(), "n2")
			if !errors.Is(err, client.ErrChangeUnknown) || !errors.Is(err, tc.also) {
				t.Fatalf("Remove = %v, want ErrChangeUnknown and %v", err, tc.also)
			}
			if n := srv.Count("cluster/remove"); n != 2 {
				t.Fatalf("%d attempts, want 2 (one retry)", n)
			}
		})
	}
}

// A request that was sent to a node that never answers may have been
// applied; one that could not even connect was not.
func TestChangeUnknownOnlyWhenSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- conn
		}
	}()
	defer func() {
		ln.Close()
		for conn := range accepted {
			conn.Close()
		}
	}()
	for _, tc := range []struct {
		name, addr string
		unknown    bool
	}{
		{"silent", ln.Addr().String(), true},
		{"refused", deadAddr(t), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New([]string{tc.addr}, client.WithFramed(false), client.WithRetries(1000), client.WithBackoff(time.Millisecond, 2*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond) // a bound, not a timing
			defer cancel()
			_, err = c.Join(ctx, "n2", "127.0.0.1:1", "127.0.0.1:2")
			if err == nil || errors.Is(err, client.ErrChangeUnknown) != tc.unknown {
				t.Fatalf("Join = %v; want ErrChangeUnknown %v", err, tc.unknown)
			}
		})
	}
}
