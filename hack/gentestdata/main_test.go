package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTestdataUpToDate fails when testdata/ differs from what the generator writes, so a
// change to internal/dev/synth cannot silently leave stale samples behind.
func TestTestdataUpToDate(t *testing.T) {
	files, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		path := filepath.Join("..", "..", "testdata", f.name)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run: go run ./hack/gentestdata)", path, err)
			continue
		}
		if !bytes.Equal(got, f.data) {
			t.Errorf("%s is stale (run: go run ./hack/gentestdata)", path)
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a, err := render()
	if err != nil {
		t.Fatal(err)
	}
	b, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].name != b[i].name || !bytes.Equal(a[i].data, b[i].data) {
			t.Fatalf("%s differs between two runs", a[i].name)
		}
	}
	total := 0
	for _, f := range a {
		total += len(f.data)
	}
	if total > 3<<20 {
		t.Fatalf("testdata totals %d bytes, keep it under 3 MB", total)
	}
}
