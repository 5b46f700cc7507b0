package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCompareUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown system", []string{"--systems", "fencelock,consul"}, `unknown "consul"`},
		{"unknown workload", []string{"--workloads", "w9"}, `unknown "w9"`},
		{"empty list", []string{"--systems", ","}, "empty list"},
		{"bad duration", []string{"--duration", "0s"}, "--duration must be positive"},
		{"stray argument", []string{"etcd"}, `unexpected argument "etcd"`},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &env{stdout: &out, stderr: &errb}
			err := run(context.Background(), e, append([]string{"compare"}, tt.args...))
			var xe *exitError
			if !errors.As(err, &xe) || xe.Code != exitUsage {
				t.Fatalf("err = %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCompareNoSystemAnswers(t *testing.T) {
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb}
	// Port 1 on loopback: nothing listens there.
	err := run(context.Background(), e, []string{"compare", "--systems", "redis", "--addr-redis", "127.0.0.1:1", "--duration", "1s"})
	var xe *exitError
	if !errors.As(err, &xe) || xe.Code != exitUnreachable {
		t.Fatalf("err = %v, want exit %d", err, exitUnreachable)
	}
	if !strings.Contains(errb.String(), "redis left out") {
		t.Errorf("stderr %q does not say redis was left out", errb.String())
	}
}

func TestParseList(t *testing.T) {
	got, err := parseList(" Redis,etcd,redis ", []string{"etcd", "redis"})
	if err != nil || strings.Join(got, ",") != "redis,etcd" {
		t.Errorf("parseList = %v, %v; want [redis etcd]", got, err)
	}
}
