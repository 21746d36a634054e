package compaction

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/harness9/compaction-operator/compaction/internal/textcut"
)

// fileTrail is execution_progress's list of the files an agent touched, by kind:
// "files edited: a.py, b/c.py; created: reproduce.py; read: x.py; deleted: reproduce.py".
type fileTrail struct {
	files [len(trailKinds)][]string
	more  [len(trailKinds)]int // files elided from each list
	// bases counts each kind's files by base name: two paths can name the same file only
	// with the same base name, so most lookups end here.
	bases [len(trailKinds)]map[string]int
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

var trailKinds = [...]string{"edited", "created", "read", "deleted"}

const (
	trailEdited = iota
	trailCreated
	trailRead
	trailDeleted
)

// trailCaps is how many files of each kind the trail lists before eliding the middle ones.
var trailCaps = [len(trailKinds)]int{20, 10, 12, 8}

const maxTrailChars = 800

var moreFiles = regexp.MustCompile(`^\+(\d{1,9}) more$`)

// parseTrail reads a trail item.
func parseTrail(it string) (fileTrail, bool) {
	var ft fileTrail
	rest, ok := strings.CutPrefix(it, "files ")
	if !ok || strings.Contains(it, "\n") {
		return ft, false
	}
	for seg := range strings.SplitSeq(rest, "; ") {
		kind, list, ok := strings.Cut(seg, ": ")
		k := -1
		for i, name := range trailKinds {
			if kind == name {
				k = i
			}
		}
		if !ok || k < 0 {
			return ft, false
		}
		for f := range strings.SplitSeq(list, ", ") {
			if m := moreFiles.FindStringSubmatch(f); m != nil {
				n, _ := strconv.Atoi(m[1])
				ft.more[k] += n
			} else if f = strings.TrimSpace(f); f != "" {
				ft.add(k, f)
			}
		}
	}
	return ft, true
}

// sameFile reports whether two paths name the same file as far as a trail can tell: the
// agent writes "/testbed/a/b.py" in one tool and "a/b.py" in another.
func sameFile(a, b string) bool {
	return a == b || pathSuffix(a, b) || pathSuffix(b, a)
}

// pathSuffix reports whether path p ends with "/"+s.
func pathSuffix(p, s string) bool {
	return len(p) > len(s) && p[len(p)-len(s)-1] == '/' && strings.HasSuffix(p, s)
}

// maxTrailFiles bounds the files a trail holds per kind: each add compares with every one,
// and a rendered trail shows a few dozen; past it, files are only counted.
const maxTrailFiles = 400

func (ft *fileTrail) has(k int, f string) bool {
	if ft.bases[k][baseName(f)] == 0 {
		return false
	}
	for _, g := range ft.files[k] {
		if sameFile(g, f) {
			return true
		}
	}
	return false
}

func (ft *fileTrail) remove(k int, f string) {
	if !ft.has(k, f) {
		return
	}
	out := ft.files[k][:0]
	for _, g := range ft.files[k] {
		if sameFile(g, f) {
			ft.bases[k][baseName(g)]--
		} else {
			out = append(out, g)
		}
	}
	ft.files[k] = out
}

// add records a file: a file created is not listed as edited or read too, one edited is not
// listed as read.
func (ft *fileTrail) add(k int, f string) {
	switch k {
	case trailCreated:
		ft.remove(trailEdited, f)
		ft.remove(trailRead, f)
	case trailEdited:
		if ft.has(trailCreated, f) {
			return
		}
		ft.remove(trailRead, f)
	case trailRead:
		if ft.has(trailCreated, f) || ft.has(trailEdited, f) {
			return
		}
	}
	switch {
	case ft.has(k, f):
	case len(ft.files[k]) >= maxTrailFiles:
		ft.more[k]++
	default:
		ft.files[k] = append(ft.files[k], f)
		if ft.bases[k] == nil {
			ft.bases[k] = map[string]int{}
		}
		ft.bases[k][baseName(f)]++
	}
}

func (ft *fileTrail) merge(o fileTrail) {
	for k := range trailKinds {
		ft.more[k] += o.more[k]
		for _, f := range o.files[k] {
			ft.add(k, f)
		}
	}
}

func (ft *fileTrail) empty() bool {
	for k := range trailKinds {
		if len(ft.files[k])+ft.more[k] > 0 {
			return false
		}
	}
	return true
}

// String renders the trail within maxTrailChars, eliding the middle of long lists (read
// files first).
func (ft *fileTrail) String() string {
	caps := trailCaps
	for {
		s := ft.render(caps)
		if len(s) <= maxTrailChars {
			return s
		}
		shrunk := false
		for _, k := range [...]int{trailRead, trailDeleted, trailCreated, trailEdited} {
			if caps[k] > 2 {
				caps[k] /= 2
				shrunk = true
				break
			}
		}
		if !shrunk {
			return textcut.Clip(s, maxTrailChars-3)
		}
	}
}

func (ft *fileTrail) render(caps [len(trailKinds)]int) string {
	var b strings.Builder
	for k, kind := range trailKinds {
		files, hidden := ft.files[k], ft.more[k]
		if len(files)+hidden == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("files ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(kind + ": ")
		// The first files, "+N more" for the elided ones, the last files.
		first, from := min(3, len(files)), min(3, len(files))
		if len(files) > caps[k] {
			first = min(3, caps[k]/2)
			from = len(files) - (caps[k] - first)
			hidden += from - first
		}
		list := append([]string(nil), files[:first]...)
		if hidden > 0 {
			list = append(list, fmt.Sprintf("+%d more", hidden))
		}
		list = append(list, files[from:]...)
		b.WriteString(strings.Join(list, ", "))
	}
	return b.String()
}

// callCounts is execution_progress's count of tool calls by tool: "tool calls: bash x4,
// str_replace_editor x2". Each summary counts only its own span, so merged counts add up.
type callCounts struct {
	names []string
	n     map[string]int
}

var countsItem = regexp.MustCompile(`^tool calls: ((?:[\w.:/-]+ x\d{1,9})(?:, [\w.:/-]+ x\d{1,9})*)$`)

func parseCounts(it string) (callCounts, bool) {
	m := countsItem.FindStringSubmatch(it)
	if m == nil {
		return callCounts{}, false
	}
	cc := callCounts{n: map[string]int{}}
	for part := range strings.SplitSeq(m[1], ", ") {
		i := strings.LastIndex(part, " x")
		n, err := strconv.Atoi(part[i+2:])
		if err != nil {
			return callCounts{}, false
		}
		cc.add(part[:i], n)
	}
	return cc, true
}

func (cc *callCounts) add(name string, n int) {
	if cc.n == nil {
		cc.n = map[string]int{}
	}
	if _, ok := cc.n[name]; !ok {
		cc.names = append(cc.names, name)
	}
	cc.n[name] += n
}

func (cc *callCounts) merge(o callCounts) {
	for _, name := range o.names {
		cc.add(name, o.n[name])
	}
}

// String lists the tools most used first, at most eight.
func (cc *callCounts) String() string {
	names := append([]string(nil), cc.names...)
	sort.SliceStable(names, func(i, j int) bool { return cc.n[names[i]] > cc.n[names[j]] })
	parts := make([]string, 0, len(names))
	other := 0
	for i, n := range names {
		if i >= 8 {
			other += cc.n[n]
			continue
		}
		parts = append(parts, fmt.Sprintf("%s x%d", n, cc.n[n]))
	}
	if other > 0 {
		parts = append(parts, fmt.Sprintf("other x%d", other))
	}
	return "tool calls: " + strings.Join(parts, ", ")
}
