package compactapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/builder"
)

// TestImageOffloadReadBack: through the compact route (real MinIO), Warn offloads a
// screenshot of the head; the toolresults route returns the image's bytes with its media
// type, and a tool result keeps being served as text.
func TestImageOffloadReadBack(t *testing.T) {
	shots := make([][]byte, 3)
	for i := range shots {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		shots[i] = make([]byte, 40<<10)
		for j := range shots[i] {
			shots[i][j] = byte(r.Uint32())
		}
	}
	history := make([]map[string]any, 0, 1+2*len(shots)+8)
	history = append(history, map[string]any{"role": "system", "content": "You operate a browser."})
	for i, shot := range shots {
		history = append(history,
			map[string]any{"role": "user", "content": []map[string]any{
				{"type": "text", "text": fmt.Sprintf("screen %d", i)},
				{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(shot)}},
			}},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("I see screen %d.", i)})
	}
	for i := range 4 {
		history = append(history, map[string]any{"role": "user", "content": fmt.Sprintf("step %d", i)}, map[string]any{"role": "assistant", "content": "ok"})
	}
	spec := builder.DefaultedSpec(128000)
	spec.ContextWindow = 3*compaction.ImageTokens*100/65 + 100 // the screenshots alone are about 64%: Warn
	s, sess := pinTestServer(t, spec)

	w, err := postCompact(t, s, sess, map[string]any{"messages": history})
	if err != nil || w.Code != http.StatusOK {
		t.Fatalf("compact: %v %d %s", err, w.Code, w.Body)
	}
	var resp struct {
		Messages []json.RawMessage           `json:"messages"`
		Record   compaction.CompactionRecord `json:"record"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Record.Tier != compaction.TierWarn || len(resp.Record.Offloaded) == 0 {
		t.Fatalf("tier %s (usage %.2f), %d offloaded; want Warn offloading screenshots", resp.Record.Tier, resp.Record.UsageBefore, len(resp.Record.Offloaded))
	}
	for _, e := range resp.Record.Offloaded {
		if e.Kind != compaction.OffloadKindImage || e.MediaType != "image/png" || e.Message == nil {
			t.Fatalf("record entry %+v, want a png image with its message", e)
		}
		shot := shots[(*e.Message-1)/2]
		if !bytes.Contains(resp.Messages[*e.Message], []byte(e.ToolCallID)) {
			t.Errorf("view message %d does not name %s: %.300s", *e.Message, e.ToolCallID, resp.Messages[*e.Message])
		}
		rw := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/v1/namespaces/ns/sessions/agent/toolresults/"+e.ToolCallID, nil)
		r.SetPathValue("id", e.ToolCallID)
		if err := s.toolResult(rw, r, sess, struct{}{}); err != nil {
			t.Fatalf("read back %s: %v", e.ToolCallID, err)
		}
		if ct := rw.Header().Get("Content-Type"); ct != "image/png" || !bytes.Equal(rw.Body.Bytes(), shot) {
			t.Errorf("read back %s: %s, %d bytes; want image/png and the %d bytes sent", e.ToolCallID, ct, rw.Body.Len(), len(shot))
		}
		if rw.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Error("an image read back without nosniff")
		}
	}
}
