// Package bounded holds the size caps of the stores' objects and the readers that enforce
// them. A store's backend may be any endpoint a policy names, so nothing read from it is
// trusted to be as small as the engine wrote it: a declared length over the cap fails before
// any byte is read, and a body that declares none, or lies, is cut one byte past the cap.
package bounded

import (
	"fmt"
	"io"

	"github.com/harness9/compaction-operator/compaction"
)

// The caps, per kind of object, with a wide margin over what the engine writes.
const (
	// StateBytes bounds a session's state. The engine's state is the summary (6,000 chars
	// by default), the compaction message, the pins (a share of the window, 15% by default)
	// and an index of ~200 bytes per offloaded result: well under 1 MiB in real sessions.
	StateBytes = 16 << 20
	// ToolResultBytes bounds an offloaded tool result or pinned text: one message, which
	// is at most a request body (8 MiB by default in the compaction API, 32 MiB in the
	// proxy and in transcripts).
	ToolResultBytes = 32 << 20
	// RecordBytes bounds one compaction record (one JSONL line): a summary, anchors and
	// the results one compaction offloaded, a few KiB to a few hundred KiB.
	RecordBytes = 8 << 20
	// ArchiveBytes bounds one archive: the messages one compaction summarized, as JSONL.
	// They are part of one request's history (8 MiB in the compaction API, 32 MiB in the
	// proxy and in transcripts), large results in it already offloaded.
	ArchiveBytes = 64 << 20
	// ResponseBytes bounds every other answer of an object store (a list page of at most
	// 1,000 keys, a batch delete's result, an error): about 1.5 MiB at most for real ones.
	ResponseBytes = 8 << 20
	// PageEntries bounds the elements under the root of a list page or a batch delete's
	// answer: S3 puts at most 1,000 keys in one, besides a dozen other fields. Each costs
	// minio-go a decoded struct (~600 bytes for a listed object) however short its XML, so
	// the answer's size alone does not bound them.
	PageEntries = 1100
	// ListPages bounds the list requests of one store call (1,000 keys a page: a million
	// keys). A listing that goes on fails with compaction.ErrTooManyPages.
	ListPages = 1000
)

// TooLarge is the error for the object name of kind what, size bytes long (negative when
// unknown: more than limit were offered), over limit. It wraps compaction.ErrObjectTooLarge.
func TooLarge(what, name string, size, limit int64) error {
	if size < 0 {
		return fmt.Errorf("%s %s is more than %d bytes, the cap for one: %w", what, name, limit, compaction.ErrObjectTooLarge)
	}
	return fmt.Errorf("%s %s is %d bytes, over the cap of %d: %w", what, name, size, limit, compaction.ErrObjectTooLarge)
}

// ReadAll reads r whole if it holds at most limit bytes. size is the length the backend
// declared (negative: none): one over limit fails before anything is read, and one within
// it is allocated once. Whatever r holds, at most limit+1 bytes are read.
func ReadAll(r io.Reader, size, limit int64, what, name string) ([]byte, error) {
	if size > limit {
		return nil, TooLarge(what, name, size, limit)
	}
	lr := io.LimitReader(r, limit+1)
	// A body that said nothing, or one longer than it said, is read in chunks and joined
	// only once it has ended within the cap, so one that goes on costs the cap, not twice it.
	if size < 0 {
		data, err := readChunks(lr)
		if err != nil {
			return nil, err
		}
		if int64(len(data)) > limit {
			return nil, TooLarge(what, name, -1, limit)
		}
		return data, nil
	}
	// Room for the byte past the declared length too, which a body longer than it said has.
	data := make([]byte, size, size+1)
	if _, err := io.ReadFull(lr, data); err != nil {
		return nil, err
	}
	var one [1]byte
	n, err := io.ReadFull(lr, one[:])
	if n == 0 && err == io.EOF {
		return data, nil // the end, where it said
	}
	if err != nil {
		return nil, err
	}
	data = append(data, one[0])
	rest, err := readChunks(lr)
	if err != nil {
		return nil, err
	}
	if int64(len(data)+len(rest)) > limit {
		return nil, TooLarge(what, name, -1, limit)
	}
	return append(data, rest...), nil
}

// readChunks reads r to its end in chunks of 4 KiB growing to 1 MiB, and joins them.
func readChunks(r io.Reader) ([]byte, error) {
	var chunks [][]byte
	total, size := 0, 4<<10
	for {
		buf := make([]byte, size)
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			chunks = append(chunks, buf[:n])
			total += n
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		size = min(size*2, 1<<20)
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	return out, nil
}

// Reader returns r for streaming, failing with TooLarge once r offers more than limit
// bytes. The first limit bytes pass through; the error comes instead of the next one.
func Reader(r io.Reader, limit int64, what, name string) io.Reader {
	return &capped{r: r, left: limit, limit: limit, what: what, name: name}
}

type capped struct {
	r           io.Reader
	left, limit int64
	what, name  string
}

func (c *capped) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.left <= 0 {
		// All that is allowed has been read: the body must end here.
		var one [1]byte
		for range 100 {
			n, err := c.r.Read(one[:])
			if n > 0 {
				return 0, TooLarge(c.what, c.name, -1, c.limit)
			}
			if err != nil {
				return 0, err
			}
		}
		return 0, io.ErrNoProgress
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
