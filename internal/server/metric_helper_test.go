package server

import (
	dto "github.com/prometheus/client_model/go"
)

// metric is the value of the series of name with the labels given (name,
// value, ...) in s's registry: 0 when it has none yet.
func (s *Server) metric(name string, labels ...string) float64 {
	fams, err := s.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
