package fs_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/fs"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

func newStore(t *testing.T) *fs.Store {
	t.Helper()
	s, err := fs.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newStoreWriting is a store that writes tool results the portable way (a named temporary
// file), or else the fastest way the system offers (O_TMPFILE on Linux).
func newStoreWriting(t *testing.T, portable bool) *fs.Store {
	t.Helper()
	s := newStore(t)
	if portable {
		fs.PortableWrites(s)
	}
	return s
}

func writePath(portable bool) string {
	if portable {
		return "portable"
	}
	return "fast"
}

func TestConformance(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(writePath(portable), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) compaction.Store { return newStoreWriting(t, portable) })
		})
	}
}

func TestLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	sid := storetest.SessionID(t)
	base := filepath.Join(root, ".harness9")
	if s.Dir() != base {
		t.Fatalf("Dir = %q, want %q", s.Dir(), base)
	}

	ref, err := s.PutToolResult(ctx, sid, "../call/1", "output")
	if err != nil {
		t.Fatal(err)
	}
	wantRef := filepath.Join(base, "tool_results", sid, compaction.SafeKey("../call/1")+".txt")
	if ref != wantRef {
		t.Fatalf("ref = %q, want %q", ref, wantRef)
	}
	if data, err := os.ReadFile(ref); err != nil || string(data) != "output" {
		t.Fatalf("reading the ref: %q, %v", data, err)
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := s.AppendRecord(ctx, storetest.NewRecord(t, sid, now.Add(time.Duration(i)*time.Second), i)); err != nil {
			t.Fatal(err)
		}
	}
	trail, err := os.ReadFile(filepath.Join(base, "compaction_records", sid+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(trail), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("trail has %d lines, want 3:\n%s", len(lines), trail)
	}
	for i, line := range lines {
		var rec compaction.CompactionRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.SummaryText == "" {
			t.Fatalf("line %d is not a record: %v", i, err)
		}
	}
	// ReadRecords returns the file as is.
	var buf bytes.Buffer
	if err := s.ReadRecords(ctx, sid, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), trail) {
		t.Fatal("ReadRecords differs from the trail file")
	}

	st := &compaction.State{LastSummary: "s", UpdatedAt: now}
	if err := s.SaveState(ctx, sid, st); err != nil {
		t.Fatal(err)
	}
	statePath := filepath.Join(base, "state", sid+".json")
	var got compaction.State
	data, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &got); err != nil || got.LastSummary != "s" {
		t.Fatalf("state file: %+v, %v", got, err)
	}

	// Private files and no leftovers from atomic writes.
	err = filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", path)
		}
		if !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s has mode %v, want no group/other access", path, fi.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	n, err := s.DeleteSession(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 { // one tool result, one trail file, one state file
		t.Fatalf("DeleteSession removed %d files, want 3", n)
	}
	for _, p := range []string{filepath.Join(base, "tool_results", sid), statePath, filepath.Join(base, "compaction_records", sid+".jsonl")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after DeleteSession (err %v)", p, err)
		}
	}
}

func TestRelativeRootGivesAbsoluteRefs(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := fs.New("work")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.PutToolResult(context.Background(), "sess-1", "call_1", "x")
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "work", ".harness9", "tool_results", "sess-1", "call_1.txt")
	// t.TempDir may sit behind a symlink (macOS /var); compare resolved paths.
	if resolve(t, ref) != resolve(t, want) || !filepath.IsAbs(ref) {
		t.Fatalf("ref = %q, want %q", ref, want)
	}
}

func TestNewRejectsBadRoot(t *testing.T) {
	if _, err := fs.New(""); err == nil {
		t.Error("New(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.New(file); err == nil {
		t.Error("New on a regular file succeeded")
	}
}

func TestInvalidSessionIDsWriteNothing(t *testing.T) {
	root := t.TempDir()
	s, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	storetest.WriteInvalid(t, s)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != root && path != s.Dir() {
			t.Errorf("invalid session IDs left %s behind", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Two stores on one directory (two CLI processes, say) append whole lines too: each line
// goes out in one O_APPEND write.
func TestTwoStoresOneTrail(t *testing.T) {
	root := t.TempDir()
	a, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sid := "shared"
	big := strings.Repeat("x", 256<<10)
	done := make(chan error, 2)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for k, s := range []*fs.Store{a, b} {
		recs := make([]*compaction.CompactionRecord, 10)
		for i := range recs {
			recs[i] = storetest.NewRecord(t, sid, base.Add(time.Duration(k*100+i)*time.Second), i)
			recs[i].SummaryText = big
		}
		go func() {
			for _, r := range recs {
				if err := s.AppendRecord(ctx, r); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(a.RecordsPath(sid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var rec compaction.CompactionRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d is torn: %v", n+1, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d lines, want 20", n)
	}
}

func resolve(t *testing.T, p string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, filepath.Base(p))
}

// TestOversizedFiles: a state or tool result file over its cap (here a sparse 1 GiB file:
// nothing of it is on disk) fails with ErrObjectTooLarge at once, naming it, without being read.
func TestOversizedFiles(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	sid := storetest.SessionID(t)
	grow := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 30); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	grow(s.StatePath(sid))
	grow(s.ToolResultPath(sid, "call_1"))
	start := time.Now()
	if _, err := s.LoadState(ctx, sid); !errors.Is(err, compaction.ErrObjectTooLarge) || !strings.Contains(err.Error(), s.StatePath(sid)) {
		t.Errorf("LoadState of a 1 GiB state: %v; want ErrObjectTooLarge naming the file", err)
	}
	if _, err := s.GetToolResult(ctx, sid, "call_1"); !errors.Is(err, compaction.ErrObjectTooLarge) {
		t.Errorf("GetToolResult of a 1 GiB result: %v; want ErrObjectTooLarge", err)
	}
	if _, err := s.PutToolResult(ctx, sid, "call_1", "x"); !errors.Is(err, compaction.ErrToolResultExists) {
		t.Errorf("PutToolResult over a 1 GiB result: %v; want ErrToolResultExists", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestToolResultDirectories: the directory of a session's results is made at its first
// write and again after it was removed; a file where it should be fails the write (the
// file is left as it is) instead of writing elsewhere.
func TestToolResultDirectories(t *testing.T) {
	for _, portable := range []bool{false, true} {
		t.Run(writePath(portable), func(t *testing.T) { testToolResultDirectories(t, portable) })
	}
}

func testToolResultDirectories(t *testing.T, portable bool) {
	ctx := context.Background()
	s := newStoreWriting(t, portable)
	dir := filepath.Dir(s.ToolResultPath("s1", "call_1"))
	if _, err := s.PutToolResult(ctx, "s1", "call_1", "one"); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutToolResult(ctx, "s1", "call_2", "two"); err != nil {
		t.Fatalf("write after the directory was removed: %v", err)
	}
	if got, err := os.ReadFile(s.ToolResultPath("s1", "call_2")); err != nil || string(got) != "two" {
		t.Fatalf("read back %q, %v", got, err)
	}

	blocked := filepath.Dir(s.ToolResultPath("s2", "call_1"))
	if err := os.MkdirAll(filepath.Dir(blocked), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blocked, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutToolResult(ctx, "s2", "call_1", "x"); err == nil {
		t.Error("a write under a file succeeded")
	}
	if got, err := os.ReadFile(blocked); err != nil || string(got) != "not a directory" {
		t.Errorf("the file in the way is now %q, %v", got, err)
	}
	if runtime.GOOS == "linux" && !portable && fs.WritesPortably(s) {
		t.Error("a missing or blocked directory made the store give up O_TMPFILE writes")
	}
}

// TestToolResultWrites: whichever way a result is written, the directory ends up holding the
// results alone (no temporary file), each readable by the owner only, an existing result is
// never replaced, and on Linux the fast path (O_TMPFILE) is the one used: none of this
// makes the store give it up.
func TestToolResultWrites(t *testing.T) {
	ctx := context.Background()
	for _, portable := range []bool{false, true} {
		t.Run(writePath(portable), func(t *testing.T) {
			s := newStoreWriting(t, portable)
			for i, content := range []string{"one", strings.Repeat("long result\n", 10000), ""} {
				id := "call_" + string(rune('a'+i))
				if _, err := s.PutToolResult(ctx, "s1", id, content); err != nil {
					t.Fatalf("put %s: %v", id, err)
				}
				if _, err := s.PutToolResult(ctx, "s1", id, content); err != nil {
					t.Fatalf("the same content again under %s: %v", id, err)
				}
			}
			if _, err := s.PutToolResult(ctx, "s1", "call_a", "other"); !errors.Is(err, compaction.ErrToolResultExists) {
				t.Fatalf("other content under call_a: %v, want ErrToolResultExists", err)
			}
			dir := filepath.Dir(s.ToolResultPath("s1", "call_a"))
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			names := make([]string, 0, len(entries))
			for _, e := range entries {
				names = append(names, e.Name())
				info, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				if perm := info.Mode().Perm(); perm&0o077 != 0 {
					t.Errorf("%s has mode %v: others can read it", e.Name(), perm)
				}
			}
			if want := []string{"call_a.txt", "call_b.txt", "call_c.txt"}; strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("directory holds %q, want %q", names, want)
			}
			if got, err := s.GetToolResult(ctx, "s1", "call_a"); err != nil || string(got) != "one" {
				t.Errorf("call_a reads back %q, %v", got, err)
			}
			if runtime.GOOS == "linux" && !portable && fs.WritesPortably(s) {
				t.Error("the store gave up O_TMPFILE writes on a Linux filesystem that has them")
			}
			// The first write makes the directory (the portable way); the two after it are
			// the fast path's on Linux, and none is when writing portably.
			want := int64(0)
			if runtime.GOOS == "linux" && !portable {
				want = 2
			}
			if got := fs.FastWrites(s); got != want {
				t.Errorf("%d results written with O_TMPFILE, want %d", got, want)
			}
		})
	}
}

// BenchmarkPutToolResults writes what a first Full compaction of 1,000 messages offloads
// (60 results of about 22 KB, 8 at a time, as the engine does) into a new session's
// directory, the fast way and the portable way. BENCH_STORE_DIR roots the stores (a tmpfs
// measures the system calls, not the disk):
//
//	BENCH_STORE_DIR=/dev/shm go test -run '^$' -bench PutToolResults -benchtime 200x ./compaction/storage/fs/
func BenchmarkPutToolResults(b *testing.B) {
	ctx := context.Background()
	content := strings.Repeat("tests/test_sniffing.py::test_roundtrip[empty-0] PASSED [  0%]\n", 22000/64)
	for _, portable := range []bool{false, true} {
		b.Run(writePath(portable), func(b *testing.B) {
			root := b.TempDir()
			if base := os.Getenv("BENCH_STORE_DIR"); base != "" {
				dir, err := os.MkdirTemp(base, "fs-bench-")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = os.RemoveAll(dir) })
				root = dir
			}
			s, err := fs.New(root)
			if err != nil {
				b.Fatal(err)
			}
			if portable {
				fs.PortableWrites(s)
			}
			b.SetBytes(60 * int64(len(content)))
			for i := 0; b.Loop(); i++ {
				sid := "s" + strconv.Itoa(i)
				var g errgroup.Group
				g.SetLimit(8)
				for k := range 60 {
					g.Go(func() error {
						_, err := s.PutToolResult(ctx, sid, "call_"+strconv.Itoa(k), content)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
