package fence_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fence"
)

// A holder paused past its lease comes back with token 33 after a newer
// holder has written with 34: the resource refuses it.
func ExampleGuard_Do() {
	g := fence.NewGuard()
	balance := 0
	write := func(token uint64, v int) error {
		return g.Do(context.Background(), "balance", token, func() error { balance = v; return nil })
	}
	fmt.Println(write(33, 100))
	fmt.Println(write(34, 200))
	err := write(33, 150)
	fmt.Println(errors.Is(err, fence.ErrStaleToken), balance)
	// Output:
	// <nil>
	// <nil>
	// true 200
}
