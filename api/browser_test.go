package api_test

import (
	"testing"

	"github.com/fencelock/fencelock/api"
)

func TestBrowserCodesStatus(t *testing.T) {
	for code, want := range map[string]int{api.CodeUnsupportedMediaType: 415, api.CodeCrossSite: 403, api.CodeHostNotAllowed: 403} {
		if got := api.Status(code); got != want {
			t.Errorf("Status(%q) = %d, want %d", code, got, want)
		}
	}
}
