package peerbench_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencelock/fencelock/bench/internal/peerbench"
)

// One workload on one system, printed as a table. Needs Redis on its
// default address (bash bench/peers/setup.sh), so it has no Output line and
// is compiled, not run, by go test.
func ExampleRunSystem() {
	ctx := context.Background()
	r, err := peerbench.RunSystem(ctx, "redis", peerbench.W1, peerbench.Options{},
		peerbench.Params{Duration: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	peerbench.FormatTable(os.Stdout, []peerbench.Result{r}, false)
}
