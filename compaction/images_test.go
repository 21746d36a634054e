package compaction

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// pixels returns n random bytes: an image's content, as far as the engine cares.
func pixels(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func chatImage(img []byte) string {
	return fmt.Sprintf(`{"type":"image_url","image_url":{"url":"data:image/png;base64,%s","detail":"high"}}`, base64.StdEncoding.EncodeToString(img))
}

func responsesImage(img []byte) string {
	return fmt.Sprintf(`{"type":"input_image","image_url":"data:image/jpeg;base64,%s"}`, base64.StdEncoding.EncodeToString(img))
}

func anthropicImage(img []byte) string {
	return fmt.Sprintf(`{"type":"image","source":{"type":"base64","media_type":"image/webp","data":"%s"}}`, base64.StdEncoding.EncodeToString(img))
}

func TestParseImage(t *testing.T) {
	img := pixels(1, 300)
	b64 := base64.StdEncoding.EncodeToString(img)
	for _, tc := range []struct {
		name, part, mediaType, textType string
		ok                              bool
	}{
		{"chat", chatImage(img), "image/png", "text", true},
		{"responses", responsesImage(img), "image/jpeg", "input_text", true},
		{"anthropic", anthropicImage(img), "image/webp", "text", true},
		{"by URL", `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`, "", "", false},
		{"anthropic by URL", `{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`, "", "", false},
		{"not base64", `{"type":"input_image","image_url":"data:image/png,abc"}`, "", "", false},
		{"not an image type", `{"type":"input_image","image_url":"data:text/html;base64,` + b64 + `"}`, "", "", false},
		{"media type with a header in it", `{"type":"image","source":{"type":"base64","media_type":"image/png\r\nX: y","data":"` + b64 + `"}}`, "", "", false},
		{"empty data", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}`, "", "", false},
		{"text", `{"type":"text","text":"base64"}`, "", "", false},
		{"not JSON", `{"type":`, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im, ok := parseImage(json.RawMessage(tc.part))
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if im.mediaType != tc.mediaType || im.textType != tc.textType || im.data != b64 {
				t.Fatalf("got %q %q (%d bytes of data), want %q %q", im.mediaType, im.textType, len(im.data), tc.mediaType, tc.textType)
			}
			if id := im.id(); !IsImageID(id) || id != im.id() {
				t.Fatalf("id %q is not an image ID", id)
			}
		})
	}
	if IsImageID("img-XYZ") || IsImageID("call_1") || IsImageID("img-"+strings.Repeat("A", 32)) {
		t.Fatal("IsImageID accepts IDs that are not an image's")
	}
}

func TestImageFromStoreRejects(t *testing.T) {
	for _, stored := range []string{"", "data:image/png;base64", "data:text/html;base64,PGI+", "plain text, a tool result", "data:" + strings.Repeat("a", 200) + ";base64,AAAA"} {
		r := bufio.NewReader(strings.NewReader(stored))
		if _, _, ok := ImageFromStore(r); ok {
			t.Errorf("ImageFromStore(%.40q) = ok", stored)
		}
		if rest, _ := io.ReadAll(r); string(rest) != stored {
			t.Errorf("ImageFromStore(%.40q) consumed what it refused", stored)
		}
	}
}
