package compaction

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unsafe"

	"github.com/harness9/compaction-operator/internal/rawjson"
)

// Images are offloaded like tool results: an agent that takes a screenshot every turn sends
// every earlier one again each turn, each counting ImageTokens. Warn (and the tiers above it)
// replaces an image of the head whose base64 data is longer than the image threshold by a
// text part naming it; the image goes to the ToolResultStore under an ID made from its bytes
// (ImageIDPrefix), as a data URL, and is read back by that ID.

// ImagePlaceholderPrefix starts the text part that replaces an offloaded image.
const ImagePlaceholderPrefix = "[Offloaded image]"

// ImageIDPrefix starts the ID of an offloaded image: ImageIDPrefix and 32 hex digits of the
// SHA-256 of its data URL.
const ImageIDPrefix = "img-"

// imageReadBackFormat is the last line of an image placeholder. A program that shows the
// placeholder to a model with a way to read it back (compaction-proxy) replaces this line,
// found with ImageReadBackLine, with that way.
const imageReadBackFormat = "[the image is stored: read it back by its id %s]"

// ImageReadBackLine matches the last line of an image placeholder; its group is the ID. IDs
// are hex, so the line reads the same inside JSON.
var ImageReadBackLine = regexp.MustCompile(`\[the image is stored: read it back by its id (img-[0-9a-f]{32})\]`)

// DefaultImageOffloadThreshold is Config.ImageOffloadThreshold's default: base64 data longer
// than 32 KiB (a screenshot is 100 KB to 2 MB; an icon stays).
const DefaultImageOffloadThreshold = 32 << 10

// NoImageOffload as Config.ImageOffloadThreshold never offloads an image.
const NoImageOffload = -1

// imageMediaType is what an image's media type may be to be offloaded: it is served back as
// the Content-Type of the read-back answer.
var imageMediaType = regexp.MustCompile(`^image/[a-z0-9][a-z0-9.+-]{0,62}$`)

// image is one base64 image of a message's content parts.
type image struct {
	mediaType string
	data      string // the base64 data, without the data URL's header
	textType  string // the text part type that replaces it in the same dialect
}

// header is the data URL header of the image's stored form.
func (im *image) header() string { return "data:" + im.mediaType + ";base64," }

// key is the size and CRC of the stored form, computed without building it.
func (im *image) key() imageKey {
	h := im.header()
	crc := crc32.Update(crc32.Update(0, castagnoli, []byte(h)), castagnoli, unsafe.Slice(unsafe.StringData(im.data), len(im.data)))
	return imageKey{len(h) + len(im.data), crc}
}

// id is the ID the image is stored under.
func (im *image) id() string {
	h := sha256.New()
	_, _ = io.WriteString(h, im.header())
	_, _ = io.WriteString(h, im.data)
	return ImageIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// imageKey finds an offloaded image by its stored form's size and CRC.
type imageKey struct {
	bytes int
	crc   uint32
}

// parseImage reads an image part of any of the three dialects: OpenAI chat (image_url with a
// data URL), OpenAI responses (input_image with a data URL) and Anthropic (image with a
// base64 source). ok is false for anything else, an image by URL included.
func parseImage(part json.RawMessage) (image, bool) {
	var p struct {
		Type     string          `json:"type"`
		ImageURL json.RawMessage `json:"image_url"`
		Source   *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
		} `json:"source"`
	}
	if json.Unmarshal(part, &p) != nil {
		return image{}, false
	}
	var im image
	switch p.Type {
	case "image":
		if p.Source == nil || p.Source.Type != "base64" {
			return image{}, false
		}
		im = image{mediaType: p.Source.MediaType, data: p.Source.Data, textType: partText}
	case "image_url", "input_image":
		var url string
		if p.Type == "image_url" {
			var u struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(p.ImageURL, &u) != nil {
				return image{}, false
			}
			url = u.URL
		} else if json.Unmarshal(p.ImageURL, &url) != nil {
			return image{}, false
		}
		head, data, ok := strings.Cut(url, ",")
		mt, isData := strings.CutPrefix(head, "data:")
		if !ok || !isData {
			return image{}, false
		}
		mt, b64 := strings.CutSuffix(mt, ";base64")
		if !b64 {
			return image{}, false
		}
		im = image{mediaType: mt, data: data, textType: partText}
		if p.Type == "input_image" {
			im.textType = "input_text"
		}
	default:
		return image{}, false
	}
	if !imageMediaType.MatchString(im.mediaType) || im.data == "" {
		return image{}, false
	}
	return im, true
}

// mayHoldImage is a cheap test that skips the parts of most messages.
func mayHoldImage(m *Message) bool {
	return len(m.ContentParts) > 0 && (m.Role == RoleUser || m.Role == RoleTool) &&
		bytes.Contains(m.ContentParts, []byte("base64"))
}

// ImagePlaceholder renders the text that stands in for an offloaded image.
func ImagePlaceholder(e OffloadEntry) string {
	var b strings.Builder
	b.WriteString(ImagePlaceholderPrefix)
	fmt.Fprintf(&b, "\nid: %s\nmedia type: %s\nsize: %d bytes as base64 (about %d bytes)\n", e.ToolCallID, e.MediaType, e.Bytes, e.Bytes*3/4)
	if e.Message != nil {
		fmt.Fprintf(&b, "from: message %d of the conversation\n", *e.Message)
	}
	fmt.Fprintf(&b, imageReadBackFormat, e.ToolCallID)
	return b.String()
}

// imageTextPart is the part that replaces an offloaded image.
func imageTextPart(textType, text string) json.RawMessage {
	return mustJSON(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{textType, text})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only called with values that always marshal
	}
	return b
}

// imageScan is what one message's content parts hold, as far as offload cares: the parts
// with the images offloaded before replaced (nil: none), those images' IDs, and how many
// images over the threshold are not offloaded yet.
type imageScan struct {
	gen   int // o.imageGen it was made under: any change to the offloaded images voids it
	parts json.RawMessage
	ids   []string
	fresh int
}

// partsKey finds a message's scan by its content parts' size and CRC.
type partsKey struct {
	n   int
	crc uint32
}

// maxImageScans bounds the scans an offloader keeps: about two per image-holding message of
// a window, each a few hundred bytes (the images themselves are not kept).
const maxImageScans = 4096

// scanImages returns what m's content parts hold. Every turn sends every earlier screenshot
// again: a message seen before, under the same offloaded images, is a CRC and a lookup, not
// a JSON parse of its megabytes.
func (o *Offloader) scanImages(m *Message) imageScan {
	if o.imageThreshold <= 0 || !mayHoldImage(m) {
		return imageScan{}
	}
	k := partsKey{len(m.ContentParts), crc32.Checksum(m.ContentParts, castagnoli)}
	o.mu.Lock()
	sc, ok := o.scans.Get(k)
	gen := o.imageGen
	o.mu.Unlock()
	if ok && sc.gen == gen {
		return sc
	}
	sc = imageScan{gen: gen}
	var parsed bool
	sc.parts, sc.ids, parsed = o.placeImages(m.ContentParts, func(im *image) (OffloadEntry, bool) {
		if len(im.data) > o.imageThreshold {
			sc.fresh++
		}
		return OffloadEntry{}, false
	})
	if !parsed {
		return sc
	}
	o.mu.Lock()
	o.scans.Add(k, sc)
	o.mu.Unlock()
	return sc
}

// offloadImages writes m's images over the threshold not offloaded yet and returns m's content
// parts with every offloaded image replaced by its placeholder (nil: none), and the entries
// of the images it wrote. at is the message's index in the conversation (-1 unknown). A
// failed write keeps the image and is returned as err, after the other images were handled.
func (o *Offloader) offloadImages(ctx context.Context, m *Message, at int) (parts json.RawMessage, created []OffloadEntry, err error) {
	sc := o.scanImages(m)
	if sc.fresh == 0 {
		return sc.parts, nil, nil
	}
	var errs []error
	parts, _, _ = o.placeImages(m.ContentParts, func(im *image) (OffloadEntry, bool) {
		if len(im.data) <= o.imageThreshold {
			return OffloadEntry{}, false
		}
		e, werr := o.putImage(ctx, im, at)
		if werr != nil {
			errs = append(errs, werr)
			return OffloadEntry{}, false
		}
		created = append(created, e)
		return e, true
	})
	return parts, created, errors.Join(errs...)
}

// placeImages replaces in content parts each image offloaded before by its placeholder, and
// each other image for which place answers an entry. It returns the parts when it replaced
// an image (nil otherwise) and the IDs of the images it replaced; ok is false when raw is
// not a JSON array.
func (o *Offloader) placeImages(raw json.RawMessage, place func(im *image) (OffloadEntry, bool)) (parts json.RawMessage, ids []string, ok bool) {
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, nil, false
	}
	for i, item := range items {
		im, isImage := parseImage(item)
		if !isImage {
			continue
		}
		e, known := o.knownImage(im.key())
		if !known {
			if e, known = place(&im); !known {
				continue
			}
		}
		items[i] = imageTextPart(im.textType, ImagePlaceholder(e))
		ids = append(ids, e.ToolCallID)
	}
	if len(ids) == 0 {
		return nil, nil, true
	}
	return rawjson.JoinArray(items), ids, true
}

// imageSaving estimates, without writing, how many characters of the estimate offloading m's
// images now would take out of the view.
func (o *Offloader) imageSaving(m *Message) int {
	return o.scanImages(m).fresh * (ImageTokens*4 - imagePlaceholderChars)
}

// imagePlaceholderChars bounds what an image placeholder counts for the estimate.
const imagePlaceholderChars = 300

// knownImage returns the entry of an image offloaded before.
func (o *Offloader) knownImage(k imageKey) (OffloadEntry, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, ok := o.images[k]
	if !ok {
		return OffloadEntry{}, false
	}
	e, ok := o.cache[id]
	return e, ok
}

// putImage writes im to the store as a data URL and caches its entry.
func (o *Offloader) putImage(ctx context.Context, im *image, at int) (OffloadEntry, error) {
	id := im.id()
	payload := im.header() + im.data
	ref, err := o.store.PutToolResult(ctx, o.sessionID, id, payload)
	if err != nil {
		return OffloadEntry{}, fmt.Errorf("offload image %s: %w", id, err)
	}
	k := im.key()
	e := OffloadEntry{ToolCallID: id, Bytes: k.bytes, CRC32C: k.crc, Ref: ref, Kind: OffloadKindImage, MediaType: im.mediaType}
	if at >= 0 {
		e.Message = &at
	}
	o.mu.Lock()
	o.cache[id] = e
	o.images[k] = id
	o.imageGen++
	o.writes++
	o.mu.Unlock()
	return e, nil
}

// imageIDsIn adds to ids the IDs of the offloaded images msgs still hold.
func (o *Offloader) imageIDsIn(msgs []Message, ids map[string]bool) {
	o.mu.Lock()
	n := len(o.images)
	o.mu.Unlock()
	if n == 0 {
		return
	}
	for i := range msgs {
		for _, id := range o.scanImages(&msgs[i]).ids {
			ids[id] = true
		}
	}
}

// ImageFromStore reads an offloaded image's stored form (a data URL) from r and returns its
// media type and a reader of its decoded bytes. ok is false when r does not hold an image's
// stored form; then nothing of r was consumed.
func ImageFromStore(r *bufio.Reader) (mediaType string, body io.Reader, ok bool) {
	// The header is short: "data:" + a media type of at most 70 bytes + ";base64,".
	const maxHeader = 96
	head, _ := r.Peek(maxHeader) // a shorter object gives what it has
	n := bytes.IndexByte(head, ',')
	if n < 0 {
		return "", nil, false
	}
	mt, ok := strings.CutPrefix(string(head[:n+1]), "data:")
	if !ok {
		return "", nil, false
	}
	mt, ok = strings.CutSuffix(mt, ";base64,")
	if !ok || !imageMediaType.MatchString(mt) {
		return "", nil, false
	}
	_, _ = r.Discard(n + 1) // peeked: cannot fail
	return mt, base64.NewDecoder(base64.StdEncoding, r), true
}

// IsImageID reports whether id names an offloaded image.
func IsImageID(id string) bool {
	rest, ok := strings.CutPrefix(id, ImageIDPrefix)
	if !ok || len(rest) != 32 {
		return false
	}
	_, err := strconv.ParseUint(rest[:16], 16, 64)
	_, err2 := strconv.ParseUint(rest[16:], 16, 64)
	return err == nil && err2 == nil && strings.ToLower(rest) == rest
}
