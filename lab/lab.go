package lab

import (
	"fmt"
	"io"
	"strings"
)

// Options selects what Print prints.
type Options struct {
	Config
	Block int  // 0: every block then the assembly; 1..Blocks: that block only
	Quiet bool // the assembly only
}

// Print writes the selected parts of the lab to w. The blocks share no
// state, so a single block needs nothing run before it.
func Print(w io.Writer, o Options) error {
	if o.Quiet && o.Block != 0 {
		return fmt.Errorf("%w: quiet prints the assembly only, so it cannot be combined with a block", ErrConfig)
	}
	var parts []string
	switch {
	case o.Quiet:
	case o.Block != 0:
		s, err := Block(o.Block, o.Config)
		if err != nil {
			return err
		}
		parts = append(parts, s)
	default:
		for n := 1; n <= Blocks; n++ {
			s, err := Block(n, o.Config)
			if err != nil {
				return err
			}
			parts = append(parts, s)
		}
	}
	if o.Block == 0 {
		s, err := AssemblyText(o.Config)
		if err != nil {
			return err
		}
		parts = append(parts, s)
	}
	_, err := io.WriteString(w, strings.Join(parts, "\n"))
	return err
}
