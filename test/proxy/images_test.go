package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// screenshot is a PNG's signature followed by random bytes: what the engine and the proxy
// see of a screenshot (neither decodes it).
func screenshot(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 11))
	b := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 40<<10)...)
	for j := 8; j < len(b); j++ {
		b[j] = byte(r.Uint32())
	}
	return b
}

// imageReadBack is the command the proxy puts at the end of an image placeholder.
var imageReadBack = regexp.MustCompile(`curl -s -o (img-[0-9a-f]{32}) '([^']+)'`)

// imagesThroughProxy: an OpenAI SDK agent sends a screenshot with every user turn, through
// the proxy and the manager. Once the session passes Warn, the upstream sees the head's
// screenshots as text parts naming them, ending with the command that saves each through
// the proxy, and that command's URL answers the screenshot's bytes as image/png.
func imagesThroughProxy(t *testing.T, s *suite) {
	const name = "agent-images"
	up, proxyURL, _ := s.proxied(t, name, 0)
	sdk := openai.NewClient(option.WithBaseURL(proxyURL+"/v1/"), option.WithAPIKey("sk-agent-key"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You operate a browser.")}}
	shots := map[string][]byte{}
	for i := range 12 {
		png := screenshot(i)
		shots[string(png)] = png
		params.Messages = append(params.Messages, openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
			openai.TextContentPart(fmt.Sprintf("screen %d: click the cheapest flight", i)),
			openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)}),
		}))
		resp, err := sdk.Chat.Completions.New(ctx, params)
		testenv.Must(t, err)
		params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam())
	}
	found := 0
	for _, req := range up.requests() {
		if !bytes.Contains(req.raw, []byte(compaction.ImagePlaceholderPrefix)) {
			continue
		}
		for _, m := range imageReadBack.FindAllSubmatch(req.raw, -1) {
			found++
			resp, err := http.Get(string(m[2]))
			testenv.Must(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" || shots[string(body)] == nil {
				t.Fatalf("GET %s: %d %s, %d bytes; want 200 image/png and one of the screenshots sent", m[2], resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
			}
		}
	}
	if found == 0 {
		last := up.requests()[len(up.requests())-1].raw
		t.Fatalf("no request reached the upstream with an offloaded screenshot; the last was %d bytes", len(last))
	}
	t.Logf("%d image placeholders read back through the proxy", found)
}
