package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/fs"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

// TestArchiveLayout: an archive is {root}/.harness9/archive/{session}/{from}-{to}.jsonl (a
// conversation's one level under its session's), private, with no temporary file left,
// and the ref is its absolute path; DeleteSession counts and removes it.
func TestArchiveLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	sid := storetest.SessionID(t)
	data := storetest.ArchiveJSONL(t, []compaction.Message{{Role: compaction.RoleUser, Content: "the task"}})
	ref, err := s.PutArchive(ctx, sid, 1, 2, data)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, ".harness9", "archive", sid, "0000000001-0000000002.jsonl")
	if ref != want || s.ArchivePath(sid, 1, 2) != want {
		t.Fatalf("ref %q, ArchivePath %q; want %q", ref, s.ArchivePath(sid, 1, 2), want)
	}
	conv := compaction.ConversationSessionID(sid, "sub-1")
	convRef, err := s.PutArchive(ctx, conv, 3, 7, data)
	if err != nil {
		t.Fatal(err)
	}
	if wantConv := filepath.Join(root, ".harness9", "archive", sid, "conversations", "sub-1", "0000000003-0000000007.jsonl"); convRef != wantConv {
		t.Fatalf("conversation ref %q, want %q", convRef, wantConv)
	}
	for _, p := range []string{ref, convRef} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v, want no group/other access", p, fi.Mode().Perm())
		}
	}
	entries, err := os.ReadDir(filepath.Dir(ref))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
	n, err := s.DeleteSession(ctx, sid)
	if err != nil || n != 2 {
		t.Fatalf("DeleteSession = %d, %v; want the two archives", n, err)
	}
	if _, err := os.Stat(filepath.Join(root, ".harness9", "archive", sid)); !os.IsNotExist(err) {
		t.Errorf("the session's archive directory is still there: %v", err)
	}
}
