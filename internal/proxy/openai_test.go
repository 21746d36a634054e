package proxy

import (
	"bytes"
	"testing"
)

// TestOpenAIRewriteKeepsFieldBytes: the fields a rewrite does not touch keep their value
// bytes, and their keys are not HTML-escaped (<, > and & stay as they are: the same JSON, but
// not what the agent sent). A key is decoded and written again, so one the agent escaped
// itself comes back unescaped.
func TestOpenAIRewriteKeepsFieldBytes(t *testing.T) {
	body := []byte(`{"model":"m","metadata":{"a<b":"x&y"},"x<y>":"<z>","messages":[{"role":"user","content":"hi"}]}`)
	req, err := openAIProtocol{}.decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	out, err := req.(*openAIRequest).rewrite(req.history())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"metadata":{"a<b":"x&y"}`, `"x<y>":"<z>"`, `"model":"m"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("rewritten body %s lacks %s", out, want)
		}
	}
}
