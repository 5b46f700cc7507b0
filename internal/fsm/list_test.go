package fsm

import (
	"fmt"
	"sync"
	"testing"
)

// TestListWhileApplying: pages are read under the read lock while
// commands apply (run with -race): every page is in key order and holds
// at most its limit.
func TestListWhileApplying(t *testing.T) {
	a, _ := newApplier(t)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				after := ""
				for {
					page := a.f.ListAfter("k/", after, a.f.Now(), 7)
					for i := 1; i < len(page); i++ {
						if page[i-1].Key >= page[i].Key {
							t.Errorf("page out of order: %v", page)
							return
						}
					}
					if len(page) > 7 {
						t.Errorf("page of %d", len(page))
						return
					}
					if len(page) < 7 {
						break
					}
					after = page[len(page)-1].Key
				}
			}
		}()
	}
	for i := range 2000 {
		k := fmt.Sprintf("k/%03d", i%200)
		if i%3 == 2 {
			a.do(Command{Op: OpRelease, Now: tsec, Key: k, Holder: "h"})
		} else {
			a.do(Command{Op: OpAcquire, Now: tsec, Key: k, Holder: "h", TTL: sec})
		}
	}
	close(done)
	wg.Wait()
}
