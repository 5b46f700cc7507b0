package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/client"
)

// A client with a token speaks frames like any other: the token is sent
// once at the start of each framed connection and the server serves every
// request on it as that principal; a connection without it stays
// anonymous.
func TestAuthTokenOverFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := realServer(t)
	anon, err := client.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	boot, err := anon.ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New([]string{addr}, client.WithAuthToken(boot.Secret))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	who, err := admin.WhoAmI(ctx)
	if err != nil || who.Principal != "admin" {
		t.Fatalf("WhoAmI with the admin token = %+v, %v", who, err)
	}
	if n := admin.FramedConns("http://" + addr); n == 0 {
		t.Fatal("the client with a token made no framed connection: its calls went over HTTP")
	}
	if _, err := admin.Grant(ctx, "jobs/a", "admin/w1", time.Minute, 0); err != nil {
		t.Fatalf("Grant over frames with the admin token: %v", err)
	}
	if _, err := anon.Get(ctx, "jobs/a"); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("Get without a token = %v, want ErrUnauthenticated", err)
	}
	if n := anon.FramedConns("http://" + addr); n == 0 {
		t.Fatal("the anonymous client made no framed connection")
	}
	var ae *client.APIError
	if _, err := anon.Grant(ctx, "jobs/b", "x", time.Minute, 0); !errors.As(err, &ae) || ae.Code != api.CodeUnauthenticated {
		t.Fatalf("anonymous Grant = %v, want unauthenticated", err)
	}
}
