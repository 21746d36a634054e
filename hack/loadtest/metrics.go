package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// scraper reads the manager's Prometheus text metrics.
type scraper struct{ url string }

// samples are metric values by series ("name{labels}" as the text format writes it).
type samples map[string]float64

func (s *scraper) scrape(ctx context.Context) (samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape manager metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape manager metrics: %s", resp.Status)
	}
	out := samples{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sub is s - earlier, series by series.
func (s samples) sub(earlier samples) samples {
	out := samples{}
	for k, v := range s {
		out[k] = v - earlier[k]
	}
	return out
}

func (s samples) get(series string) float64 { return s[series] }

// sum adds every series of metric name.
func (s samples) sum(name string) float64 {
	total := 0.0
	for k, v := range s {
		if k == name || strings.HasPrefix(k, name+"{") {
			total += v
		}
	}
	return total
}

// byLabel sums metric name by the value of label, divided by per, as "a=1.00 b=2.00".
func (s samples) byLabel(name, label string, per float64) string {
	by := map[string]float64{}
	for k, v := range s {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		_, rest, ok := strings.Cut(k, label+`="`)
		if !ok {
			continue
		}
		value, _, _ := strings.Cut(rest, `"`)
		by[value] += v
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%.2f", k, by[k]/per))
	}
	return strings.Join(parts, " ")
}
