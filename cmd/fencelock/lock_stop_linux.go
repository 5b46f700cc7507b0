//go:build linux

package main

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cldStopped is waitid's si_code for a child stopped by a signal.
const cldStopped = 5

// watchStops reports each time the process pid (lock's child, CMD's
// first process) is stopped by a signal, until it exits or quit is
// closed; done is closed when the watcher is gone. It never reaps the
// child: exec.Cmd.Wait does (it waits for exit only, so the two do not
// compete for a stop).
func watchStops(pid int, quit <-chan struct{}) (stops <-chan os.Signal, done <-chan struct{}) {
	sc, dc := make(chan os.Signal), make(chan struct{})
	go func() {
		defer close(dc)
		for {
			// Peek (WNOWAIT) at the next change: a stop, or the exit
			// that cmd.Wait will collect.
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || info.Code != cldStopped {
				return // exited (or already reaped)
			}
			sig := syscall.Signal(childStatus(&info))
			// Take the stop off the queue, so that the next peek waits
			// for the next change (WSTOPPED alone never reaps an exit).
			for {
				var again unix.Siginfo
				if err := unix.Waitid(unix.P_PID, pid, &again, unix.WSTOPPED|unix.WNOHANG, nil); err != unix.EINTR {
					break
				}
			}
			select {
			case sc <- sig:
			case <-quit:
				return
			}
		}
	}()
	return sc, dc
}

// childStatus is si_status of a SIGCHLD siginfo: in the union after
// si_signo, si_errno and si_code (aligned to a pointer), after si_pid and
// si_uid.
func childStatus(info *unix.Siginfo) int32 {
	const word = unsafe.Sizeof(uintptr(0))
	union := (3*unsafe.Sizeof(int32(0)) + word - 1) &^ (word - 1)
	return *(*int32)(unsafe.Add(unsafe.Pointer(info), union+2*unsafe.Sizeof(int32(0))))
}
