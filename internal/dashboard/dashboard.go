package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the dashboard is served under; Prefix without its
// slash redirects to it.
const Prefix = "/ui/"

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy lets the page load its own script, styles and
// images and call its own server, and nothing else: no inline script, no
// other origin, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body  []byte
	ctype string
	etag  string
}

// Handler serves the dashboard: Prefix is the page, Prefix+name an asset,
// the path without the slash a redirect, anything else below it 404. It
// answers only GET and HEAD.
func Handler() http.Handler {
	files := map[string]asset{}
	// The files are compiled in: walking them cannot fail at run time.
	_ = fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = http.DetectContentType(b)
		}
		files[strings.TrimPrefix(p, "assets/")] = asset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return handler(files)
}

// Owns reports whether p is a path the dashboard answers.
func Owns(p string) bool {
	return p == strings.TrimSuffix(Prefix, "/") || strings.HasPrefix(p, Prefix)
}

type handler map[string]asset

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		target := Prefix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return
	}
	if name == "" {
		name = "index.html"
	}
	a, ok := h[name]
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	hd.Set("Content-Type", a.ctype)
	hd.Set("ETag", a.etag)
	// Revalidated on every load, so a new binary's page is never mixed
	// with an old script; the ETag makes that a 304.
	hd.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
