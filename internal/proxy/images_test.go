package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
)

// An image placeholder's last line becomes a command that saves the image through the proxy,
// in user messages and tool results, the same bytes every turn, the JSON still valid.
func TestImageReadBackRewrite(t *testing.T) {
	p, err := New(Config{Upstream: echo(t), Compactor: newToolStub(10000), ReadBackURL: "http://127.0.0.1:4141"})
	if err != nil {
		t.Fatal(err)
	}
	at := 3
	id := "img-" + strings.Repeat("0123456789abcdef", 2)
	ph := compaction.ImagePlaceholder(compaction.OffloadEntry{ToolCallID: id, Bytes: 90000, Kind: compaction.OffloadKindImage, MediaType: "image/png", Message: &at})
	part, _ := json.Marshal(map[string]string{"type": "text", "text": ph})
	parts := json.RawMessage(`[{"type":"text","text":"the screen"},` + string(part) + `]`)
	view := []compaction.Message{
		{Role: compaction.RoleUser, ContentParts: parts},
		{Role: compaction.RoleTool, ToolCallID: "toolu_1", ContentParts: json.RawMessage("[" + string(part) + "]")},
	}
	out := p.withReadBack("conv1", view)
	want := "[the image is stored: save it with: curl -s -o " + id + " 'http://127.0.0.1:4141/compaction/v1/toolresults/" + id + "?conversation=conv1']"
	for i := range out {
		var got []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(out[i].ContentParts, &got); err != nil {
			t.Fatalf("message %d: parts are not JSON after the rewrite: %v", i, err)
		}
		last := got[len(got)-1].Text
		if !strings.HasSuffix(last, want) || !strings.HasPrefix(last, compaction.ImagePlaceholderPrefix) || strings.Contains(last, "read it back by its id") {
			t.Errorf("message %d: placeholder after the rewrite:\n%s\nwant it to end with\n%s", i, last, want)
		}
	}
	if !bytes.Equal(view[0].ContentParts, parts) {
		t.Error("the rewrite changed its input")
	}
	again := p.withReadBack("conv1", view)
	if !bytes.Equal(again[0].ContentParts, out[0].ContentParts) {
		t.Error("the rewrite is not deterministic")
	}
	if got := p.withReadBack("../x", view); &got[0] != &view[0] {
		t.Error("rewritten for a conversation name the route refuses")
	}
}

// The read-back route serves an offloaded image as its bytes, typed, without the text marker.
func TestImageReadBackRoute(t *testing.T) {
	stub := newToolStub(10000)
	png := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{0, 1, 2, 250}, 5000)...)
	id := "img-" + strings.Repeat("ab", 16)
	stub.stored[id] = string(png)
	srv, m := newToolProxy(t, stub)
	code, ctype, body := get(t, srv.URL+"/compaction/v1/toolresults/"+id+"?conversation=abc123")
	if code != http.StatusOK || ctype != "image/png" || body != string(png) {
		t.Fatalf("read back an image: %d %s, %d bytes; want 200 image/png and the %d bytes stored", code, ctype, len(body), len(png))
	}
	if n := value(m.ReadBacks.WithLabelValues("ok")); n != 1 {
		t.Errorf("%v read-backs counted ok, want 1", n)
	}
	// Bytes that are no image are not served as one.
	stub.stored[id] = "<html><script>alert(1)</script>"
	if _, ctype, _ := get(t, srv.URL+"/compaction/v1/toolresults/"+id+"?conversation=abc123"); ctype != "application/octet-stream" {
		t.Errorf("non-image bytes under an image ID served as %s", ctype)
	}
}
