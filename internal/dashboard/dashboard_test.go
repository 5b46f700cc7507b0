package dashboard

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// The page names only its own files, and every one is served: nothing
// comes from another origin (a CDN, a font service), so the dashboard
// works offline and under its Content-Security-Policy.
func TestAssetsAreSelfContained(t *testing.T) {
	h := Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	code, page := get(Prefix)
	if code != 200 {
		t.Fatalf("%s: %d", Prefix, code)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("the page names %d files; it has a script, a stylesheet and an icon", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if ref == "./" {
			continue
		}
		if strings.Contains(ref, ":") || strings.HasPrefix(ref, "//") {
			t.Errorf("the page refers to %q, outside the server", ref)
			continue
		}
		if code, _ := get(Prefix + ref); code != 200 {
			t.Errorf("%s%s: %d", Prefix, ref, code)
		}
	}
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for name := range h.(handler) {
		_, body := get(Prefix + name)
		for _, u := range external.FindAllString(body, -1) {
			if u != "http://www.w3.org" { // the SVG namespace, a name and not a fetch
				t.Errorf("%s names %q", name, u)
			}
		}
	}
}
