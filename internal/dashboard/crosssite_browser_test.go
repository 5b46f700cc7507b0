package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browsers cannot drive the API from another site (issue 24, item 6), in
// a real browser: a page of another origin sends what it can without a
// CORS preflight, and a page that rebinds its own name to the server's
// address tries to read it. Before, the first released the lock and the
// second read every lock.

// browserWith is browser with Chromium resolving every name in hosts to
// 127.0.0.1, as a DNS-rebinding attacker's resolver would.
func browserWith(t *testing.T, hosts []string, timeout time.Duration) context.Context {
	t.Helper()
	path := chromiumPath(t)
	var rules []string
	for _, h := range hosts {
		rules = append(rules, "MAP "+h+" 127.0.0.1")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("host-resolver-rules", strings.Join(rules, ",")),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	return ctx
}

func TestACrossSitePageCannotChangeOrReadLocks(t *testing.T) {
	ctx := browserWith(t, []string{"evil.test"}, time.Minute)
	ts := startServer(t)
	ts.acquire(t, "a/victim", "alice", 10*time.Minute, "")

	// The attacker's page, on another origin, sends the release every way
	// a page may without a preflight: fetch with text/plain, fetch with an
	// untyped Blob, and a form.
	release := `{"key":"a/victim","holder":"alice"}`
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id=f method=post action=%q enctype="text/plain" target=sink>
<input name=%q value=%q></form><iframe name=sink></iframe>
<script>
(async () => {
  const url = %q;
  const body = %q;
  await fetch(url, {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body}).catch(() => {});
  await fetch(url, {method: 'POST', mode: 'no-cors', body: new Blob([body])}).catch(() => {});
  document.querySelector('iframe').onload = () => { document.title = 'sent'; };
  document.getElementById('f').submit();
})();
</script>`, ts.url+"/v1/release", release[:len(release)-1]+`,"x":"`, `"}`, ts.url+"/v1/release", release)
	}))
	defer evil.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatal(err)
	}
	wait[bool](ctx, t, "the attacker's page to have sent its requests", `document.title === 'sent'`)
	var l struct{ Holder string }
	if st := ts.call(context.Background(), t, "GET", "/v1/lock?key=a/victim", "", nil, &l); st != 200 || l.Holder != "alice" {
		t.Fatalf("after the cross-site page: GET a/victim %d, holder %q; want alice's lease", st, l.Holder)
	}

	// The rebound name reaches the server's address but is refused; the
	// page never sees a lock.
	port := ts.url[strings.LastIndexByte(ts.url, ':')+1:]
	if err := chromedp.Do(ctx, chromedp.Navigate("http://evil.test:"+port+"/v1/locks")); err != nil {
		t.Fatal(err)
	}
	text := wait[string](ctx, t, "the rebound page's answer", `document.body && document.body.innerText`)
	if strings.Contains(text, "a/victim") || !strings.Contains(text, "host_not_allowed") {
		t.Fatalf("a page under a rebound name read: %q", text)
	}

	// The dashboard itself, reached as localhost, still works.
	if err := chromedp.Do(ctx, chromedp.Navigate("http://localhost:"+port+"/ui/?poll=200")); err != nil {
		t.Fatal(err)
	}
	r := row("a/victim")
	if got := wait[string](ctx, t, "the dashboard to show the lock", r+` && `+r+`.querySelector('.holder').textContent`); got != "alice" {
		t.Errorf("the dashboard shows holder %q", got)
	}
}
