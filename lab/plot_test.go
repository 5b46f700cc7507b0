package lab

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// svgTexts parses an SVG as XML and returns every <text> element's content.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	inText := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return texts
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			inText = v.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(v))
			}
		case xml.EndElement:
			inText = false
		}
	}
}

func TestChartsHaveAxesLabelsAndLegend(t *testing.T) {
	odd := DefaultConfig()
	odd.TTLs = []time.Duration{7 * time.Second} // one point: the axis must still span something
	odd.Gaps = []time.Duration{0}               // nothing positive for a log axis
	odd.Ops = 300
	want := map[string][]string{
		"lease-sizing.svg": {"lease TTL (seconds, log scale)", "zombie rate (% of holders)",
			"wedged time per operation (ms)", "zombie rate: holders outliving their lease", "10"},
		"check-gap.svg": {"lost updates", "lease + client check", "lease + fencing: 0 lost",
			"share of lease-only losses (%)", "1000"},
	}
	for _, c := range Charts {
		for _, cfg := range []Config{DefaultConfig(), odd} {
			var buf bytes.Buffer
			if err := c.Write(&buf, cfg); err != nil {
				t.Fatalf("%s: %v", c.File, err)
			}
			joined := strings.Join(svgTexts(t, buf.Bytes()), "\n")
			if cfg.Ops != odd.Ops {
				for _, w := range want[c.File] {
					if !strings.Contains(joined, w) {
						t.Errorf("%s lacks the text %q", c.File, w)
					}
				}
			}
			if strings.Contains(buf.String(), "NaN") || strings.Contains(buf.String(), "Inf") {
				t.Errorf("%s (ops %d) has a NaN or Inf coordinate", c.File, cfg.Ops)
			}
		}
	}
}

func TestChartsRefuseBadConfig(t *testing.T) {
	bad := DefaultConfig()
	bad.TTLs = nil
	for _, c := range Charts {
		if err := c.Write(io.Discard, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", c.File, err)
		}
	}
}
