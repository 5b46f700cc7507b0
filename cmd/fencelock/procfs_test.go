//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// What the process tests read of processes, from /proc (Linux): without it
// a process reads as gone and a group as empty.

// procState is the state letter /proc gives pid (R, S, T, Z, …), or "gone".
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}

// groupMembers lists the processes of the process group pgid.
func groupMembers(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		f := strings.Fields(rest) // state, ppid, pgrp, …
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// alive is the processes of pids that are neither gone nor zombies (an
// orphan's zombie lasts until an init that reaps it gets to it; some
// containers' never does).
func alive(pids []int) []string {
	var out []string
	for _, p := range pids {
		if s := procState(p); s != "Z" && s != "gone" {
			out = append(out, fmt.Sprintf("%d (%s)", p, s))
		}
	}
	return out
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
