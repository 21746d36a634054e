package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark line's figures.
type result struct {
	nsPerOp, bytesPerOp, allocsPerOp, offloads float64
	tier                                       string // the "tier" metric, when reported
}

// row is one history size and tier, with its modes.
type row struct {
	n     int
	tier  string
	modes map[string]result // "first", "steady", "next"
}

// benchLine matches BenchmarkCompactWithRecord/n=1000/Full/first-2   20   123 ns/op ...; a
// tier with one mode (None) has no mode in its name.
var benchLine = regexp.MustCompile(`^BenchmarkCompactWithRecord/n=(\d+)/([A-Za-z]+)(?:/([a-z]+))?(?:-\d+)?\s+\d+\s+(.*)$`)

var tierOrder = []string{"None", "Warn", "Soft", "Full", "Emergency"}

func parse(sc *bufio.Scanner) ([]*row, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	byKey := map[string]*row{}
	var rows []*row
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "--- FAIL") {
			return nil, fmt.Errorf("the benchmark failed: %s", l) // a partial table would pass for a whole one
		}
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("size %q: %w", m[1], err)
		}
		mode := m[3]
		if mode == "" {
			mode = "steady" // None is measured in one mode, the same compactor again
		}
		r, err := metrics(m[4])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Text(), err)
		}
		key := m[1] + "/" + m[2]
		if byKey[key] == nil {
			byKey[key] = &row{n: n, tier: m[2], modes: map[string]result{}}
			rows = append(rows, byKey[key])
		}
		byKey[key].modes[mode] = r
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(rows, func(a, b *row) int {
		if a.n != b.n {
			return a.n - b.n
		}
		return slices.Index(tierOrder, a.tier) - slices.Index(tierOrder, b.tier)
	})
	return rows, nil
}

// metrics reads "123 ns/op  4.5 MB/s  60.00 offloads/op  2.000 tier  10 B/op  3 allocs/op".
func metrics(s string) (result, error) {
	f := strings.Fields(s)
	var r result
	for i := 0; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return r, fmt.Errorf("value %q: %w", f[i], err)
		}
		switch f[i+1] {
		case "ns/op":
			r.nsPerOp = v
		case "B/op":
			r.bytesPerOp = v
		case "allocs/op":
			r.allocsPerOp = v
		case "offloads/op":
			r.offloads = v
		case "tier":
			r.tier = tierOrder[min(max(int(v), 0), len(tierOrder)-1)]
		}
	}
	if r.nsPerOp == 0 {
		return r, fmt.Errorf("no ns/op")
	}
	return r, nil
}

func render(w io.Writer, rows []*row) error {
	var b strings.Builder
	b.WriteString("| messages | tier | first | steady | next | B/op (first) | allocs/op (first) | offloads (first) |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		first, hasFirst := r.modes["first"]
		steady := ms(r.modes["steady"])
		if s, ok := r.modes["steady"]; ok && s.tier != "" && s.tier != r.tier {
			steady += " (done as " + s.tier + ")"
		}
		mem := r.modes["steady"] // None: its only mode
		if hasFirst {
			mem = first
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", thousands(r.n), r.tier, ms(first), steady, ms(r.modes["next"]),
			si(mem.bytesPerOp), thousands(int(mem.allocsPerOp)), thousands(int(mem.offloads)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ms is a duration in milliseconds with three significant digits, or "" when not measured.
func ms(r result) string {
	if r.nsPerOp == 0 {
		return ""
	}
	v := r.nsPerOp / 1e6
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	case v >= 1:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.3f ms", v)
	}
}

// si is a byte count as 55 K, 2.3 M.
func si(v float64) string {
	switch {
	case v >= 10e6:
		return fmt.Sprintf("%.0f M", v/1e6)
	case v >= 1e6:
		return fmt.Sprintf("%.1f M", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0f K", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// thousands writes n with commas: 10,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
