package compaction_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

func toolParts(id string, parts ...string) compaction.Message {
	m := withParts(compaction.RoleTool, parts...)
	m.ToolCallID = id
	return m
}

func withParts(role compaction.Role, parts ...string) compaction.Message {
	return compaction.Message{Role: role, ContentParts: json.RawMessage("[" + strings.Join(parts, ",") + "]")}
}

// imageSession is a conversation whose head holds three screenshots in the three dialects, a
// small image and an image by URL, and whose tail holds one more screenshot.
func imageSession() (msgs []compaction.Message, head [][]byte, tailImg []byte) {
	head = [][]byte{pixels(1, 48<<10), pixels(2, 48<<10), pixels(3, 48<<10)}
	tailImg = pixels(4, 48<<10)
	small := pixels(5, 1000)
	msgs = make([]compaction.Message, 0, 18)
	msgs = append(msgs,
		compaction.Message{Role: compaction.RoleSystem, Content: "You operate a browser."},
		withParts(compaction.RoleUser, `{"type":"text","text":"Book the cheapest flight to Lisbon."}`, chatImage(head[0])),
		compaction.Message{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "c1", Type: "function", Function: compaction.FunctionCall{Name: "screenshot", Arguments: "{}"}}}},
		toolParts("c1", anthropicImage(head[1])),
		compaction.Message{Role: compaction.RoleAssistant, Content: "I see the search form."},
		withParts(compaction.RoleUser, responsesImage(head[2]), chatImage(small), `{"type":"image_url","image_url":{"url":"https://example.com/logo.png"}}`),
		compaction.Message{Role: compaction.RoleAssistant, Content: "Searching."},
	)
	for i := range 5 {
		msgs = append(msgs, compaction.Message{Role: compaction.RoleUser, Content: fmt.Sprintf("step %d", i)}, compaction.Message{Role: compaction.RoleAssistant, Content: "ok"})
	}
	msgs = append(msgs, withParts(compaction.RoleUser, `{"type":"text","text":"the latest screen"}`, chatImage(tailImg)))
	return msgs, head, tailImg
}

func imageCompactor(t *testing.T, st compaction.Store, cfg compaction.Config) *compaction.ProgressiveCompactor {
	t.Helper()
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(st), compaction.WithSessionID("s1"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// imageConfig puts imageSession in Warn with a target every head image is needed for.
func imageConfig(msgs []compaction.Message) compaction.Config {
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(msgs) * 100 / 65)
	cfg.TargetThreshold = 0.1
	return cfg
}

// TestWarnOffloadsImages: Warn replaces each screenshot of the head by a text part of its
// dialect naming it, keeps small images, images by URL and the tail's, stores each image as
// a data URL the read-back decodes to its bytes, names them in the record, and shows the same
// placeholders on the next turn, after a restart too, without writing again.
func TestWarnOffloadsImages(t *testing.T) {
	ctx := context.Background()
	msgs, head, tailImg := imageSession()
	st := newStore()
	cfg := imageConfig(msgs)
	c := imageCompactor(t, st, cfg)
	view, rec, err := c.CompactWithRecord(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tier != compaction.TierWarn {
		t.Fatalf("tier %s, want Warn (usage %.2f)", rec.Tier, rec.UsageBefore)
	}
	if len(rec.Offloaded) != 3 {
		t.Fatalf("offloaded %d entries, want the 3 head screenshots: %+v", len(rec.Offloaded), rec.Offloaded)
	}
	wantAt := []int{1, 3, 5}
	wantType := []string{"image/png", "image/webp", "image/jpeg"}
	for i, e := range rec.Offloaded {
		if e.Kind != compaction.OffloadKindImage || e.MediaType != wantType[i] || e.Message == nil || *e.Message != wantAt[i] || !compaction.IsImageID(e.ToolCallID) {
			t.Errorf("entry %d: %+v (message %v), want an image of %s from message %d", i, e, e.Message, wantType[i], wantAt[i])
		}
		data, err := st.GetToolResult(ctx, "s1", e.ToolCallID)
		if err != nil {
			t.Fatal(err)
		}
		mt, body, ok := compaction.ImageFromStore(bufio.NewReader(bytes.NewReader(data)))
		if !ok || mt != wantType[i] {
			t.Fatalf("stored form of %s: %q %v", e.ToolCallID, mt, ok)
		}
		got, err := io.ReadAll(body)
		if err != nil || !bytes.Equal(got, head[i]) {
			t.Fatalf("image %d read back: %d bytes, %v; want its %d bytes", i, len(got), err, len(head[i]))
		}
	}
	if rec.TokensAfter >= rec.TokensBefore-3*compaction.ImageTokens+300 {
		t.Errorf("tokens %d -> %d: three images should have left the estimate", rec.TokensBefore, rec.TokensAfter)
	}
	// The view: each head screenshot is a text part of its dialect; the rest is as it came.
	wantPart := map[int]string{1: `{"type":"text","text":"[Offloaded image]`, 3: `[{"type":"text","text":"[Offloaded image]`, 5: `[{"type":"input_text","text":"[Offloaded image]`}
	for i, prefix := range wantPart {
		if !bytes.Contains(view[i].ContentParts, []byte(prefix)) || !bytes.Contains(view[i].ContentParts, []byte("from: message "+fmt.Sprint(i))) {
			t.Errorf("view message %d: %.200s", i, view[i].ContentParts)
		}
		if !compaction.ImageReadBackLine.Match(view[i].ContentParts) {
			t.Errorf("view message %d has no read-back line: %.300s", i, view[i].ContentParts)
		}
		if !json.Valid(view[i].ContentParts) {
			t.Errorf("view message %d: parts are not JSON", i)
		}
	}
	if !bytes.Contains(view[1].ContentParts, []byte(`{"type":"text","text":"Book the cheapest flight to Lisbon."}`)) {
		t.Error("the text part beside an offloaded image changed")
	}
	for _, keep := range []string{base64.StdEncoding.EncodeToString(pixels(5, 1000)), "https://example.com/logo.png"} {
		if !bytes.Contains(view[5].ContentParts, []byte(keep)) {
			t.Errorf("a small image or an image by URL was offloaded: %.300s", view[5].ContentParts)
		}
	}
	last := view[len(view)-1]
	if !bytes.Equal(last.ContentParts, msgs[len(msgs)-1].ContentParts) || !bytes.Contains(last.ContentParts, []byte(base64.StdEncoding.EncodeToString(tailImg))) {
		t.Error("the tail's image was offloaded")
	}
	if msgs[1].ContentParts[0] != '[' || !bytes.Contains(msgs[1].ContentParts, []byte(base64.StdEncoding.EncodeToString(head[0]))) {
		t.Fatal("the caller's history was modified")
	}

	// The next turn shows the same placeholders without writing; so does a restarted replica.
	puts := st.Puts()
	next := append(append([]compaction.Message(nil), msgs...), compaction.Message{Role: compaction.RoleAssistant, Content: "Found one."})
	for _, c := range []*compaction.ProgressiveCompactor{c, imageCompactor(t, st, cfg)} {
		view2, rec2, err := c.CompactWithRecord(ctx, next)
		if err != nil {
			t.Fatal(err)
		}
		for i := range wantPart {
			if !bytes.Equal(view2[i].ContentParts, view[i].ContentParts) {
				t.Errorf("turn 2 (tier %s): message %d shown differently: %.200s", rec2.Tier, i, view2[i].ContentParts)
			}
		}
		if st.Puts() != puts || len(rec2.Offloaded) != 0 {
			t.Errorf("turn 2 wrote again: %d puts (was %d), %d entries", st.Puts(), puts, len(rec2.Offloaded))
		}
	}
}

// TestImageOffloadOffAndFailing: NoImageOffload keeps every image; a store that fails keeps
// the images, names the failure in the record and goes on (fail-open).
func TestImageOffloadOffAndFailing(t *testing.T) {
	ctx := context.Background()
	msgs, _, _ := imageSession()
	cfg := imageConfig(msgs)
	cfg.ImageOffloadThreshold = compaction.NoImageOffload
	st := newStore()
	view, rec, err := imageCompactor(t, st, cfg).CompactWithRecord(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Offloaded) != 0 || st.Puts() != 0 || !bytes.Equal(view[1].ContentParts, msgs[1].ContentParts) {
		t.Fatalf("NoImageOffload offloaded %d images", len(rec.Offloaded))
	}

	st = newStore()
	st.FailPut(errors.New("bucket unreachable"))
	view, rec, err = imageCompactor(t, st, imageConfig(msgs)).CompactWithRecord(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.Error, "bucket unreachable") || !strings.Contains(rec.Error, "offload image img-") {
		t.Fatalf("record error %q does not name the failed image write", rec.Error)
	}
	if len(rec.Offloaded) != 0 || !bytes.Equal(view[1].ContentParts, msgs[1].ContentParts) {
		t.Fatal("an image whose write failed left the view")
	}
}

// BenchmarkImagesTurn is the cost images add to a turn that compacts nothing: a conversation
// of 40 screenshots (200 KB of base64 each), decoded from JSON as a request is, the older ones offloaded, the next turn shown
// with their placeholders (each image part parsed and looked up by its CRC).
func BenchmarkImagesTurn(b *testing.B) {
	ctx := context.Background()
	msgs := make([]compaction.Message, 0, 81)
	msgs = append(msgs, compaction.Message{Role: compaction.RoleSystem, Content: "You operate a browser."})
	for i := range 40 {
		msgs = append(msgs, withParts(compaction.RoleUser, fmt.Sprintf(`{"type":"text","text":"screen %d"}`, i), chatImage(pixels(uint64(i), 150<<10))),
			compaction.Message{Role: compaction.RoleAssistant, Content: "clicked"})
	}
	cfg := compaction.DefaultConfig(compaction.EstimateTokens(msgs) * 100 / 65)
	cfg.TargetThreshold = 0.1
	c, err := compaction.NewProgressiveCompactor(cfg, compaction.WithStore(newStore()), compaction.WithSessionID("s1"))
	if err != nil {
		b.Fatal(err)
	}
	if _, rec, err := c.CompactWithRecord(ctx, msgs); err != nil || len(rec.Offloaded) == 0 {
		b.Fatalf("setup: %v, %d offloaded", err, len(rec.Offloaded))
	}
	// Decoded from JSON, as every request is (which also works out what the parts count).
	data, err := json.Marshal(append(msgs, compaction.Message{Role: compaction.RoleUser, Content: "go on"}))
	if err != nil {
		b.Fatal(err)
	}
	var next []compaction.Message
	if err := json.Unmarshal(data, &next); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(next) / 2 * 200 << 10))
	b.ResetTimer()
	for range b.N {
		if _, _, err := c.CompactWithRecord(ctx, next); err != nil {
			b.Fatal(err)
		}
	}
}
