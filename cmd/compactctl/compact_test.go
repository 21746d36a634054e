package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	fsstore "github.com/harness9/compaction-operator/compaction/storage/fs"
)

// compactAt runs compact on msgs with a window that puts them at the given usage ratio.
func compactAt(t *testing.T, msgs []compaction.Message, ratio float64, extra ...string) (compactResult, string) {
	t.Helper()
	dir := t.TempDir()
	path := writeTranscript(t, dir, "t.jsonl", msgs)
	store := filepath.Join(dir, "store")
	window := windowFor(compaction.EstimateTokens(msgs), ratio)
	args := append([]string{"compact", "--context-window", strconv.Itoa(window), "--store", store}, extra...)
	r := runCLI(t, "", append(args, path)...)
	if r.code != exitOK {
		t.Fatalf("compact: %v", r)
	}
	return decodeCompact(t, r.stdout), store
}

func TestCompactTiers(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 10, bigResult: 6000})
	cases := []struct {
		ratio float64
		tier  compaction.Tier
	}{
		{0.30, compaction.TierNone},
		{0.65, compaction.TierWarn},
		{0.75, compaction.TierSoft},
		{0.87, compaction.TierFull},
		{0.97, compaction.TierEmergency},
	}
	for _, c := range cases {
		t.Run(c.tier.String(), func(t *testing.T) {
			t.Parallel()
			out, store := compactAt(t, msgs, c.ratio)
			rec := out.Record
			if rec.Tier != c.tier {
				t.Fatalf("tier %s, want %s (usage %.2f)", rec.Tier, c.tier, c.ratio)
			}
			if rec.TokensBefore != compaction.EstimateTokens(msgs) || rec.MsgsBefore != len(msgs) {
				t.Errorf("record before = %d tokens, %d msgs; want %d, %d", rec.TokensBefore, rec.MsgsBefore, compaction.EstimateTokens(msgs), len(msgs))
			}
			if rec.MsgsAfter != len(out.Messages) || rec.TokensAfter != compaction.EstimateTokens(out.Messages) {
				t.Errorf("record after = %d tokens, %d msgs; output has %d tokens, %d msgs",
					rec.TokensAfter, rec.MsgsAfter, compaction.EstimateTokens(out.Messages), len(out.Messages))
			}
			if rec.SessionID != defaultSessionID {
				t.Errorf("session %q, want %q", rec.SessionID, defaultSessionID)
			}
			trail := filepath.Join(store, ".harness9", "compaction_records", defaultSessionID+".jsonl")
			switch c.tier {
			case compaction.TierNone:
				if len(out.Messages) != len(msgs) || len(rec.Offloaded) != 0 {
					t.Errorf("None changed the history: %d -> %d messages, %d offloaded", len(msgs), len(out.Messages), len(rec.Offloaded))
				}
				if _, err := os.Stat(trail); !os.IsNotExist(err) {
					t.Errorf("None wrote a record trail: %v", err)
				}
				return
			case compaction.TierWarn:
				if len(out.Messages) != len(msgs) || rec.Summarized != 0 {
					t.Errorf("Warn must keep the structure: %d -> %d messages, %d summarized", len(msgs), len(out.Messages), rec.Summarized)
				}
				checkOffloaded(t, store, msgs, out)
			case compaction.TierSoft, compaction.TierFull:
				if rec.Summarized == 0 || len(out.Messages) >= len(msgs) || rec.Error != "" {
					t.Errorf("%s: %d summarized, %d -> %d messages, error %q", c.tier, rec.Summarized, len(msgs), len(out.Messages), rec.Error)
				}
				if rec.TokensAfter >= rec.TokensBefore {
					t.Errorf("%s did not shrink the context: %d -> %d tokens", c.tier, rec.TokensBefore, rec.TokensAfter)
				}
				if len(rec.Anchors) != len(compaction.AnchorTypes) {
					t.Errorf("%d anchors, want %d", len(rec.Anchors), len(compaction.AnchorTypes))
				}
				// system, the pinned task, then the compaction message.
				if out.Messages[1].Content != msgs[1].Content || !strings.HasPrefix(out.Messages[2].Content, compaction.CompactionHeader) {
					t.Errorf("the view does not open with the pinned task and the compaction message: %q, %q", clip(out.Messages[1].Content, 100), clip(out.Messages[2].Content, 100))
				}
			case compaction.TierEmergency:
				if rec.Error != compaction.EmergencyError || rec.PreservedTail < 6 || len(out.Messages) >= len(msgs) {
					t.Errorf("Emergency: error %q, tail %d", rec.Error, rec.PreservedTail)
				}
			}
			if n := countLines(t, trail); n != 1 {
				t.Errorf("record trail has %d lines, want 1", n)
			}
		})
	}
}

// checkOffloaded checks that the big first tool result was offloaded: listed in the record,
// a file under the store, replaced by a placeholder whose ref holds the original bytes.
func checkOffloaded(t *testing.T, store string, in []compaction.Message, out compactResult) {
	t.Helper()
	var original string
	for _, m := range in {
		if m.ToolCallID == "call_0" {
			original = m.Content
		}
	}
	if len(out.Record.Offloaded) != 1 || out.Record.Offloaded[0].ToolCallID != "call_0" || out.Record.Offloaded[0].Bytes != len(original) {
		t.Fatalf("offloaded = %+v, want call_0 with %d bytes", out.Record.Offloaded, len(original))
	}
	file := filepath.Join(store, ".harness9", "tool_results", defaultSessionID, "call_0.txt")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("offloaded file missing: %v (store holds %v)", err, listFiles(t, store))
	}
	var placeholder string
	for _, m := range out.Messages {
		if m.ToolCallID == "call_0" {
			placeholder = m.Content
		}
	}
	if !strings.HasPrefix(placeholder, compaction.PlaceholderPrefix) {
		t.Fatalf("call_0 was not replaced by a placeholder: %q", clip(placeholder, 200))
	}
	ref := refOf(t, placeholder)
	if ref != out.Record.Offloaded[0].Ref {
		t.Errorf("placeholder ref %q differs from the record's %q", ref, out.Record.Offloaded[0].Ref)
	}
	if !filepath.IsAbs(ref) {
		ref = filepath.Join(store, ref)
	}
	got, err := os.ReadFile(ref)
	if err != nil {
		t.Fatalf("read the placeholder's ref: %v", err)
	}
	if string(got) != original {
		t.Fatalf("the ref holds %d bytes that differ from the original %d", len(got), len(original))
	}
}

// refOf returns the "ref: " line of a placeholder.
func refOf(t *testing.T, placeholder string) string {
	t.Helper()
	for _, line := range strings.Split(placeholder, "\n") {
		if ref, ok := strings.CutPrefix(line, "ref: "); ok {
			return ref
		}
	}
	t.Fatalf("placeholder has no ref line:\n%s", placeholder)
	return ""
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCompactForceIsEmergency(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 10})
	// A window so large that the usage is far below Warn: --force still runs Emergency.
	out, _ := compactAt(t, msgs, 0.01, "--force")
	if out.Record.Tier != compaction.TierEmergency || out.Record.Error != compaction.EmergencyError {
		t.Fatalf("--force: tier %s, error %q; want Emergency", out.Record.Tier, out.Record.Error)
	}
	if len(out.Messages) >= len(msgs) {
		t.Errorf("--force kept %d of %d messages", len(out.Messages), len(msgs))
	}
	// Flags after the transcript work too.
	dir := t.TempDir()
	path := writeTranscript(t, dir, "t.jsonl", msgs)
	r := runCLI(t, "", "compact", "--store", dir, path, "--force")
	if r.code != exitOK || decodeCompact(t, r.stdout).Record.Tier != compaction.TierEmergency {
		t.Fatalf("flag after the transcript: %v", r)
	}
}

func TestCompactStdinAndJSONArray(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 4})
	var b strings.Builder
	b.WriteString("[\n")
	for i, m := range msgs {
		j, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b.WriteString(",\n")
		}
		b.Write(j)
	}
	b.WriteString("\n]\n")
	r := runCLI(t, b.String(), "compact", "--store", "", "--force", "-")
	if r.code != exitOK {
		t.Fatalf("compact - with a JSON array on stdin: %v", r)
	}
	out := decodeCompact(t, r.stdout)
	if out.Record.Tier != compaction.TierEmergency || out.Record.MsgsBefore != len(msgs) {
		t.Fatalf("record %+v", out.Record)
	}
}

// The default store is in the per-user cache directory, never the current one (a run inside
// a checkout must leave nothing to commit), and the run says where it writes; -h names it
// too. An empty --store writes nothing.
func TestCompactStoreLocation(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, "cache"))
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	wantRoot := filepath.Join(cacheDir, "compaction-operator")

	msgs := genTranscript(genOptions{rounds: 10, bigResult: 6000})
	in := filepath.Join(t.TempDir(), "t.jsonl")
	writeTranscript(t, filepath.Dir(in), filepath.Base(in), msgs)
	window := strconv.Itoa(windowFor(compaction.EstimateTokens(msgs), 0.65))

	r := runCLI(t, "", "compact", "--store", "", "--context-window", window, in)
	if r.code != exitOK {
		t.Fatalf("--store '': %v", r)
	}
	out := decodeCompact(t, r.stdout)
	if len(out.Record.Offloaded) != 1 || !strings.HasPrefix(out.Record.Offloaded[0].Ref, "mem://") {
		t.Errorf("dry run offloaded %+v, want one mem:// ref", out.Record.Offloaded)
	}
	if files := listFiles(t, dir); len(files) != 0 {
		t.Fatalf("--store '' wrote %v", files)
	}
	if strings.Contains(r.stderr, "writing") {
		t.Errorf("--store '' announced a store: %q", r.stderr)
	}

	r = runCLI(t, "", "compact", "--context-window", window, "--session-id", "s-1", in)
	if r.code != exitOK {
		t.Fatalf("default store: %v", r)
	}
	if files := listFiles(t, dir); len(files) != 0 {
		t.Errorf("default store wrote into the current directory: %v", files)
	}
	for _, rel := range []string{
		".harness9/tool_results/s-1/call_0.txt",
		".harness9/compaction_records/s-1.jsonl",
		".harness9/state/s-1.json",
	} {
		if _, err := os.Stat(filepath.Join(wantRoot, rel)); err != nil {
			t.Errorf("default store: %v (have %v)", err, listFiles(t, home))
		}
	}
	if want := "writing offloaded results, records and state under " + filepath.Join(wantRoot, ".harness9"); strings.Count(r.stderr, want) != 1 {
		t.Errorf("stderr does not say once where the default store writes (%q):\n%s", want, r.stderr)
	}

	// An explicit --store is not announced.
	r = runCLI(t, "", "compact", "--context-window", window, "--store", t.TempDir(), in)
	if r.code != exitOK || strings.Contains(r.stderr, "writing") {
		t.Errorf("explicit --store: %v", r)
	}

	if r := runCLI(t, "", "compact", "-h"); !strings.Contains(r.stdout+r.stderr, wantRoot) {
		t.Errorf("compact -h does not name the default store %s:\n%v", wantRoot, r)
	}
}

func TestCompactBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	good := genTranscript(genOptions{rounds: 2})
	line := func(i int) string {
		b, err := good[i].MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name, content, want string
	}{
		{"malformed line 3", line(0) + "\n" + line(1) + "\n{\"role\": \"assistant\", \"content\": \n" + line(3) + "\n", "line 3"},
		{"orphaned tool result on line 3", line(0) + "\n" + line(1) + "\n" + `{"role":"tool","tool_call_id":"nope","content":"x"}` + "\n", "line 3"},
		{"unknown role on line 3", line(0) + "\n\n" + `{"role":"robot","content":"x"}` + "\n", "line 3"},
		{"empty file", "", "empty transcript"},
		{"truncated array", "[" + line(0) + ",", "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "bad.jsonl")
			if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			store := filepath.Join(dir, "store")
			if err := os.Mkdir(store, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range []string{"compact", "simulate"} {
				r := runCLI(t, "", cmd, "--store", store, path)
				if r.code != exitError {
					t.Fatalf("%s: exit %d, want %d: %v", cmd, r.code, exitError, r)
				}
				if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "bad.jsonl") {
					t.Errorf("%s: stderr does not name the file and %q: %s", cmd, c.want, r.stderr)
				}
				if r.stdout != "" {
					t.Errorf("%s: wrote to stdout: %q", cmd, r.stdout)
				}
				if files := listFiles(t, store); len(files) != 0 {
					t.Errorf("%s: bad input created %v in the store", cmd, files)
				}
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		r := runCLI(t, "", "compact", "--store", dir, filepath.Join(dir, "nope.jsonl"))
		if r.code != exitError || !strings.Contains(r.stderr, "nope.jsonl") || r.stdout != "" {
			t.Fatalf("missing file: %v", r)
		}
		if files := listFiles(t, dir); len(files) != 0 {
			t.Errorf("created %v", files)
		}
	})
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeTranscript(t, dir, "t.jsonl", genTranscript(genOptions{rounds: 2}))
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--nope", path}, "flag provided but not defined: -nope"},
		{[]string{"--context-window", "abc", path}, "invalid value"},
		{[]string{"--context-window", "0", path}, "--context-window 0"},
		{[]string{"--warn", "70", "--soft", "60", path}, "--soft 60: soft threshold 0.60 must be above warn threshold 0.70"},
		{[]string{"--warn", "0", path}, "--warn 0: warn threshold 0.00 must be in (0, 1]"},
		{[]string{"--emergency", "101", path}, "--emergency 101"},
		{[]string{"--full", "95", path}, "--emergency 95: emergency threshold 0.95 must be above full threshold 0.95"},
		{[]string{"--warn", "50", path}, "target threshold 0.50 must be in (0, warn threshold 0.50) (TargetThreshold is the engine's default: no flag sets it)"},
		{[]string{"--offload-threshold", "0", path}, "--offload-threshold"},
		{[]string{"--hook-threshold", "-1", path}, "--hook-threshold"},
		{[]string{"--preview-lines", "0", path}, "--preview-lines"},
		{[]string{"--min-tail", "0", path}, "--min-tail"},
		{[]string{"--max-summary-chars", "10", path}, "--max-summary-chars"},
		{[]string{"--session-id", "../x", path}, "--session-id"},
		{[]string{"--pin-rule", "Everything", path}, `--pin-rule Everything: pin rule "Everything" must be one of`},
		{[]string{"--pin-percent", "51", path}, "--pin-percent 51: pin budget 0.51 must be in (0, 0.5]"},
		{[]string{"--summarizer", "magic", path}, `--summarizer "magic"`},
		{[]string{"--summarizer", "openai", path}, "--openai-model is required"},
		{[]string{"--summarizer", "openai", "--openai-model", "m", "--openai-base-url", "ftp://x", path}, "scheme must be http or https"},
		{[]string{"--openai-model", "m", path}, "--openai-model only apply to --summarizer openai"},
		{[]string{}, "missing TRANSCRIPT"},
		{[]string{path, path}, "want one TRANSCRIPT argument, got 2"},
	}
	for _, cmd := range []string{"compact", "simulate"} {
		for _, c := range cases {
			args := append([]string{cmd, "--store", store}, c.args...)
			r := runCLI(t, "", args...)
			if r.code != exitUsage {
				t.Errorf("%v: exit %d, want %d\n%v", args, r.code, exitUsage, r)
				continue
			}
			if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, fmt.Sprintf("compactctl %s -h", cmd)) {
				t.Errorf("%v: stderr lacks %q and the help hint:\n%s", args, c.want, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("%v: wrote to stdout: %q", args, r.stdout)
			}
		}
	}
	if r := runCLI(t, "", "simulate", "--store", store, "--plot", filepath.Join(dir, "no", "such", "dir", "p.svg"), path); r.code != exitError {
		t.Errorf("--plot into a missing directory: %v", r)
	}
	if files := listFiles(t, store); len(files) != 0 {
		t.Errorf("usage errors created %v in the store", files)
	}
}

// Tool results over --hook-threshold are offloaded at source, wherever they are, as the
// agent's OffloadHook does; --hook-threshold 0 turns that off.
func TestCompactAppliesOffloadHook(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 3})
	last := len(msgs) - 2 // the last tool result, inside the preserved tail
	msgs[last].Content = toolOutput(9, 12000)
	dir := t.TempDir()
	path := writeTranscript(t, dir, "t.jsonl", msgs)

	r := runCLI(t, "", "compact", "--store", dir, path)
	if r.code != exitOK {
		t.Fatalf("compact: %v", r)
	}
	out := decodeCompact(t, r.stdout)
	if out.Record.Tier != compaction.TierNone {
		t.Fatalf("tier %s, want None at the default window", out.Record.Tier)
	}
	got := out.Messages[last].Content
	if !strings.HasPrefix(got, compaction.PlaceholderPrefix) {
		t.Fatalf("the 12000-byte result was not offloaded at source: %q", clip(got, 200))
	}
	stored, err := os.ReadFile(refOf(t, got))
	if err != nil || string(stored) != msgs[last].Content {
		t.Fatalf("hook-offloaded result not stored intact: %v", err)
	}
	if !strings.Contains(r.stderr, "offloaded 1 tool result(s)") {
		t.Errorf("stderr does not report the hook offload: %q", r.stderr)
	}

	r = runCLI(t, "", "compact", "--store", "", "--hook-threshold", "0", path)
	if r.code != exitOK {
		t.Fatalf("compact --hook-threshold 0: %v", r)
	}
	if out := decodeCompact(t, r.stdout); out.Messages[last].Content != msgs[last].Content {
		t.Errorf("--hook-threshold 0 still offloaded the result")
	}
}

// TestCompactPinFlags: --pin-rule chooses what a compaction pins, --pin-percent bounds it.
func TestCompactPinFlags(t *testing.T) {
	t.Parallel()
	msgs := genTranscript(genOptions{rounds: 10, bigResult: 6000})
	later := compaction.Message{Role: compaction.RoleUser, Content: "Also keep the metrics name cache_evictions_total unchanged."}
	msgs = append(msgs[:6:6], append([]compaction.Message{later}, msgs[6:]...)...)
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 2}, // the task and the later instruction
		{[]string{"--pin-rule", "Task"}, 1},
		{[]string{"--pin-rule", "None"}, 0},
		{[]string{"--pin-rule", "Marked"}, 0},
	} {
		out, _ := compactAt(t, msgs, 0.87, c.args...)
		if out.Record.PinnedMessages != c.want {
			t.Errorf("%v: %d pins, want %d", c.args, out.Record.PinnedMessages, c.want)
		}
		if c.want > 0 && out.Messages[1].Content != msgs[1].Content {
			t.Errorf("%v: the view does not open with the task: %q", c.args, clip(out.Messages[1].Content, 80))
		}
	}
	// A budget too small for the task keeps its head and tail and names the full text's ID.
	msgs[1].Content = "Fix the flaky TestEviction.\n" + strings.Repeat("Details of the report. ", 150) + "\nKeep the public API unchanged."
	out, store := compactAt(t, msgs, 0.87, "--pin-rule", "Task", "--pin-percent", "10")
	pin := out.Messages[1].Content
	if out.Record.PinnedMessages != 1 || !strings.HasPrefix(pin, "Fix the flaky TestEviction.") ||
		!strings.HasSuffix(pin, "Keep the public API unchanged.") || !strings.Contains(pin, "tool_call_id pinned-message-1") {
		t.Fatalf("a 10%% budget: %d pins, first message %q", out.Record.PinnedMessages, clip(pin, 300))
	}
	fs, err := fsstore.New(store)
	if err != nil {
		t.Fatal(err)
	}
	if full, err := fs.GetToolResult(context.Background(), defaultSessionID, "pinned-message-1"); err != nil || string(full) != msgs[1].Content {
		t.Fatalf("the pinned task's full text is not readable back: %v (%d bytes)", err, len(full))
	}
}
