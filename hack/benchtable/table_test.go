package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkCompactWithRecord/n=1000/None-2              	      20	    300000 ns/op	3091.18 MB/s	         0 offloads/op	   55022 B/op	      20 allocs/op
BenchmarkCompactWithRecord/n=1000/Full/first-2        	      20	  13700000 ns/op	  28.38 MB/s	        60.00 offloads/op	 9700000 B/op	   26380 allocs/op
BenchmarkCompactWithRecord/n=1000/Full/steady-2       	      20	   9700000 ns/op	  83.09 MB/s	         0 offloads/op	 6641708 B/op	   21332 allocs/op
BenchmarkCompactWithRecord/n=1000/Full/next-2         	      20	     22000 ns/op	41332.95 MB/s	         0 offloads/op	         0 tier	   21888 B/op	     114 allocs/op
BenchmarkCompactWithRecord/n=1000/Soft/steady-2       	      20	  11600000 ns/op	  83.09 MB/s	         0 offloads/op	         3.000 tier	 6641708 B/op	   21332 allocs/op
BenchmarkCompactWithRecord/n=100/Warn/first-2         	      20	   1090000 ns/op	  28.38 MB/s	         8.000 offloads/op	  252000 B/op	     394 allocs/op
PASS
`

func TestRender(t *testing.T) {
	var out strings.Builder
	if err := run(strings.NewReader(sample), &out); err != nil {
		t.Fatal(err)
	}
	want := `| messages | tier | first | steady | next | B/op (first) | allocs/op (first) | offloads (first) |
|---:|---|---:|---:|---:|---:|---:|---:|
| 100 | Warn | 1.09 ms |  |  | 252 K | 394 | 8 |
| 1,000 | None |  | 0.300 ms |  | 55 K | 20 | 0 |
| 1,000 | Soft |  | 11.6 ms (done as Full) |  | 6.6 M | 21,332 | 0 |
| 1,000 | Full | 13.7 ms | 9.70 ms | 0.022 ms | 9.7 M | 26,380 | 60 |
`
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestRunRejects(t *testing.T) {
	for _, in := range []string{"", "PASS\n", "BenchmarkCompactWithRecord/n=1/Full/first-2 1 x ns/op\n", sample + "--- FAIL: BenchmarkCompactWithRecord/n=1000/Soft/steady\n"} {
		if err := run(strings.NewReader(in), &strings.Builder{}); err == nil {
			t.Errorf("run(%q) = nil, want an error", in)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
