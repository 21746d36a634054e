package compactapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/builder"
)

// TestOffloadNeverReplacesAnOriginal is issue 14's weakness 8 as an attack: a second
// result offloaded under a tool call ID the session already used (local models number
// their calls call_0, call_1... every turn) must not replace the original, which only the
// store holds. The same body again is accepted (a retry); a different one is a 409 and the
// original stays readable.
func TestOffloadNeverReplacesAnOriginal(t *testing.T) {
	spec := builder.DefaultedSpec(128000)
	spec.Offload.HookThresholdChars = 100
	s, sess := pinTestServer(t, spec)
	post := func(content string) *httptest.ResponseRecorder {
		t.Helper()
		body, err := json.Marshal(map[string]any{"message": map[string]any{"role": "tool", "tool_call_id": "call_0", "content": content}})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/ns/sessions/agent/toolresults", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		req, err := s.parseOffload(body)
		if err == nil {
			err = s.offload(w, r, sess, req)
		}
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				t.Fatalf("offload: %v", err)
			}
			writeError(w, ae.code, ae.reason, ae.msg)
		}
		return w
	}
	original := strings.Repeat("the original output, held only by the store\n", 100)
	if w := post(original); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"offloaded":{`) {
		t.Fatalf("first offload: %d %.300s", w.Code, w.Body)
	}
	if w := post(original); w.Code != http.StatusOK {
		t.Fatalf("the same result again (a retry): %d %s", w.Code, w.Body)
	}
	w := post(strings.Repeat("a later result under the reused ID call_0\n", 100))
	var resp compactclient.ErrorResponse
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("409 body: %v: %s", err, w.Body)
	}
	if w.Code != http.StatusConflict || resp.Reason != compactclient.ReasonToolResultExists {
		t.Fatalf("a different result under call_0: %d %s, want 409 %s", w.Code, w.Body, compactclient.ReasonToolResultExists)
	}
	rw := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/v1/namespaces/ns/sessions/agent/toolresults/call_0", nil)
	r.SetPathValue("id", "call_0")
	if err := s.toolResult(rw, r, sess, struct{}{}); err != nil || rw.Body.String() != original {
		t.Fatalf("read back call_0: %v, %d bytes: want the original", err, rw.Body.Len())
	}
}
