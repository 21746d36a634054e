package synth

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// module is one file of the fictional repository. Its text is rendered on first use from
// its own random stream, so it reads the same every time the agent looks at it, and edits
// change it.
type module struct {
	path     string // repository-relative
	name     string
	test     bool
	size     int // bytes to render to
	seed     uint64
	src      string
	rendered bool
	used     map[string]bool
	bugs     []*bugSite
	of       *module // for a test module: the module under test
	nTests   int     // tests a pytest run collects from this (test) module
}

// bugSite is one bug of the story: a function with a buggy line in a source module and a
// failing test for it in the matching test module.
type bugSite struct {
	tpl       *bugTemplate
	mod       *module
	testMod   *module
	fn, test  string
	noun      string
	rep       *strings.Replacer
	state     int // 0 buggy, 1 wrong fix applied, 2 fixed
	announced bool
	edits     int
	addedTest string // the regression test the agent added, if any
	committed bool
}

func (b *bugSite) s(text string) string { return b.rep.Replace(text) }

func (b *bugSite) line(state int) string {
	switch state {
	case 0:
		return b.s(b.tpl.old)
	case 1:
		return b.s(b.tpl.bad)
	}
	return b.s(b.tpl.good)
}

func (b *bugSite) currentFailure() *failure {
	switch b.state {
	case 0:
		return &b.tpl.orig
	case 1:
		return &b.tpl.badFail
	}
	return nil
}

func (g *gen) buildModules() {
	big := map[int]bool{}
	for len(big) < 2 {
		big[g.r.IntN(len(g.dom.modules))] = true
	}
	for i, name := range g.dom.modules {
		size := g.between(5300, 11000)
		if big[i] {
			size = g.between(14000, 40000)
		}
		src := &module{path: "src/" + g.dom.pkg + "/" + name + ".py", name: name, size: size, seed: g.r.Uint64(), used: map[string]bool{}}
		tst := &module{path: "tests/test_" + name + ".py", name: "test_" + name, test: true, size: g.between(5300, 13000), seed: g.r.Uint64(), used: map[string]bool{}, of: src, nTests: g.between(9, 42)}
		g.sources = append(g.sources, src)
		g.tests = append(g.tests, tst)
		if big[i] {
			g.bigMods = append(g.bigMods, src)
		}
	}
}

func (g *gen) testFor(m *module) *module {
	for i, s := range g.sources {
		if s == m {
			return g.tests[i]
		}
	}
	panic("no test module for " + m.path)
}

// newBug creates the next bug in a source module other than prev's when possible.
func (g *gen) newBug(prev *bugSite) *bugSite {
	tpl := &bugTemplates[g.tplOrder[len(g.bugs)%len(g.tplOrder)]]
	var mod *module
	for range 8 {
		mod = g.sources[g.r.IntN(len(g.sources))]
		if prev == nil || mod != prev.mod {
			break
		}
	}
	noun := g.pick(g.dom.nouns)
	attr := g.pick(g.dom.attrs)
	fn := ""
	for try := 0; fn == ""; try++ {
		cand := g.pick(verbs) + "_" + noun
		if try > 20 {
			cand += "_" + strconv.Itoa(try)
		}
		if !g.names[cand] && !mod.used[cand] {
			fn = cand
		}
	}
	g.names[fn] = true
	mod.used[fn] = true
	test := "test_" + fn + "_" + g.pick([]string{"regression", "issue_" + strconv.Itoa(g.between(120, 4800)), "edge_case", "reported_case", "handles_input"})
	b := &bugSite{tpl: tpl, mod: mod, testMod: g.testFor(mod), fn: fn, test: test, noun: noun}
	b.rep = replacer(
		"§", "`", "{fn}", fn, "{test}", test, "{nouns}", plural(noun), "{noun}", noun, "{Noun}", camel(noun),
		"{attr}", attr, "{pkg}", g.dom.pkg, "{mod}", mod.name, "{path}", g.abs(mod),
	)
	mod.bugs = append(mod.bugs, b)
	b.testMod.bugs = append(b.testMod.bugs, b)
	if mod.rendered {
		mod.src += "\n\n" + b.s(tpl.src)
	}
	if b.testMod.rendered {
		b.testMod.src += fmt.Sprintf("\n\nfrom %s.%s import %s\n\n\n%s\n", g.dom.pkg, mod.name, fn, b.s(strings.Join(tpl.testLines, "\n")))
	}
	g.bugs = append(g.bugs, b)
	return b
}

// apply edits the bug's line to the given state and returns the old and new text.
func (g *gen) apply(b *bugSite, state int) (oldStr, newStr string) {
	oldStr, newStr = b.line(b.state), b.line(state)
	src := g.source(b.mod)
	b.mod.src = strings.Replace(src, oldStr, newStr, 1)
	b.state = state
	b.edits++
	return oldStr, newStr
}

// source returns the module's current text.
func (g *gen) source(m *module) string {
	if !m.rendered {
		if m.test {
			m.src = g.renderTest(m)
		} else {
			m.src = g.renderSource(m)
		}
		m.rendered = true
	}
	return m.src
}

// lineOf is the 1-based line of the first line containing needle, or 1.
func lineOf(src, needle string) int {
	i := strings.Index(src, needle)
	if i < 0 {
		return 1
	}
	return strings.Count(src[:i], "\n") + 1
}

// ---- rendering ----

var helperTemplates = []string{
	`def {fn}({nouns}, *, strict=False):
    """{Verb} every {noun} in §§{nouns}§§.

    Raises ValueError when §§strict§§ is set and a {noun} is missing.
    """
    result = []
    for {noun} in {nouns}:
        if {noun} is None:
            if strict:
                raise ValueError("{noun} must not be None")
            continue
        result.append(_normalize({noun}.{attr}))
    logger.debug("{fn}: kept %d of %d {nouns}", len(result), len({nouns}))
    return result
`,
	`class {Cls}:
    """In-memory registry of {nouns}, keyed by §§{attr}§§."""

    def __init__(self, {nouns}=None):
        self._items = {}
        for {noun} in {nouns} or ():
            self.add({noun})

    def add(self, {noun}):
        key = {noun}.{attr}
        if key in self._items:
            raise KeyError(f"duplicate {noun}: {key!r}")
        self._items[key] = {noun}

    def get(self, key, default=None):
        return self._items.get(key, default)

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(sorted(self._items.values(), key=lambda item: item.{attr}))
`,
	`def {fn}(value, default={const}):
    """Parse §§value§§ into a {noun} {attr}, falling back to §§default§§."""
    if value in (None, ""):
        return default
    if isinstance(value, (int, float)):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        logger.warning("invalid {attr} %r, using %r", value, default)
        return default
`,
	`@dataclass
class {Cls}:
    {attr}: int = 0
    name: str = ""
    tags: list = field(default_factory=list)
    {other}: Optional[str] = None

    def to_dict(self):
        return {"{attr}": self.{attr}, "name": self.name, "tags": list(self.tags), "{other}": self.{other}}

    @classmethod
    def from_dict(cls, data):
        return cls(
            {attr}=data.get("{attr}", 0),
            name=data.get("name", ""),
            tags=list(data.get("tags", [])),
            {other}=data.get("{other}"),
        )
`,
	`def {fn}({nouns}, key=None):
    """Group §§{nouns}§§ by §§key§§ (default: their §§{attr}§§)."""
    key = key or (lambda item: item.{attr})
    groups = {}
    for item in {nouns}:
        groups.setdefault(key(item), []).append(item)
    return dict(sorted(groups.items()))
`,
	`def _{fn}_key({noun}, version={const}):
    return f"{pkg}:{noun}:{version}:{getattr({noun}, '{attr}', None)}"


def {fn}({noun}, cache=None):
    """Return the cached {noun} when present, computing and storing it otherwise."""
    cache = _DEFAULT_CACHE if cache is None else cache
    key = _{fn}_key({noun})
    if key not in cache:
        cache[key] = _compute({noun})
    return cache[key]
`,
	`def {fn}(path, *, encoding="utf-8"):
    """Load {nouns} from the JSON file at §§path§§."""
    with open(path, encoding=encoding) as fh:
        data = json.load(fh)
    if not isinstance(data, list):
        raise TypeError(f"expected a list of {nouns}, got {type(data).__name__}")
    return [{Cls}.from_dict(item) for item in data]
`,
	`def {fn}({noun}, *, now=None):
    """Return the {attr} of §§{noun}§§ as of §§now§§ (default: the current time)."""
    now = now or datetime.now(timezone.utc)
    if {noun}.{attr} is None:
        return None
    delta = now - {noun}.created_at
    if delta.total_seconds() < 0:
        raise ValueError(f"{noun} {{noun}.{attr}!r} is from the future")
    return {noun}.{attr}
`,
}

var testTemplates = []string{
	`def test_{fn}_{case}(sample_{nouns}):
    result = {fn}(sample_{nouns})
    assert result is not None
    assert len(result) == {k}
`,
	`@pytest.mark.parametrize("value, expected", [(None, {k}), ("", {k}), ("7", 7), (3, 3)])
def test_{fn}_{case}(value, expected):
    assert {fn}(value, default={k}) == expected
`,
	`def test_{fn}_{case}():
    with pytest.raises(ValueError, match="must not be None"):
        {fn}([None], strict=True)
`,
	`def test_{fn}_{case}(tmp_path):
    path = tmp_path / "{nouns}.json"
    path.write_text(json.dumps([{"{attr}": {k}, "name": "a"}]), encoding="utf-8")
    loaded = {fn}(path)
    assert [item.{attr} for item in loaded] == [{k}]
`,
	`def test_{fn}_{case}(sample_{nouns}):
    first = {fn}(sample_{nouns})
    second = {fn}(list(reversed(sample_{nouns})))
    assert sorted(first) == sorted(second)
`,
}

var testCases = []string{"basic", "empty", "strict", "ordering", "roundtrip", "defaults", "invalid_input", "large_input", "unicode", "none_values", "idempotent", "sorted_output"}

func (g *gen) renderSource(m *module) string {
	r := rand.New(rand.NewPCG(m.seed, 0x5eed))
	other := g.dom.modules[r.IntN(len(g.dom.modules))]
	var b strings.Builder
	fmt.Fprintf(&b, "\"\"\"%s helpers for %s.\"\"\"\n\nfrom __future__ import annotations\n\n", camel(m.name), g.dom.about)
	b.WriteString("import json\nimport logging\nfrom dataclasses import dataclass, field\nfrom datetime import datetime, timezone\nfrom decimal import ROUND_HALF_UP, Decimal\nfrom typing import Optional\n\n")
	fmt.Fprintf(&b, "from .%s import %s\n\nlogger = logging.getLogger(__name__)\n\nDEFAULT_TIMEOUT = 30\n_DEFAULT_CACHE: dict = {}\n\n\n", other, pickR(r, g.dom.classes))
	b.WriteString("def _normalize(value):\n    if isinstance(value, str):\n        return value.strip().lower()\n    return value\n\n\n")
	chunks := 0
	bugAt := 1 + r.IntN(3)
	placed := 0
	for b.Len() < m.size || placed < len(m.bugs) {
		if chunks == bugAt && placed < len(m.bugs) {
			for _, bug := range m.bugs {
				b.WriteString(bug.s(bug.tpl.src))
				b.WriteString("\n\n")
			}
			placed = len(m.bugs)
		}
		if b.Len() >= m.size && placed == len(m.bugs) {
			break
		}
		b.WriteString(g.helper(r, m, helperTemplates, nil))
		b.WriteString("\n\n")
		chunks++
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

func (g *gen) renderTest(m *module) string {
	r := rand.New(rand.NewPCG(m.seed, 0x7e57))
	noun := pickR(r, g.dom.nouns)
	attr := pickR(r, g.dom.attrs)
	var b strings.Builder
	fmt.Fprintf(&b, "\"\"\"Tests for %s.%s.\"\"\"\n\nimport json\nfrom datetime import datetime, timezone\n\nimport pytest\n\n", g.dom.pkg, m.of.name)
	fns := make([]string, 0, len(m.bugs)+3) // the bugs' functions and up to 3 helpers
	for _, bug := range m.bugs {
		fns = append(fns, bug.fn)
	}
	helperFns := make([]string, 0, 4)
	for range 3 {
		fn := pickR(r, verbs) + "_" + pickR(r, g.dom.nouns)
		if !m.of.used[fn] {
			helperFns = append(helperFns, fn)
		}
	}
	fns = append(fns, helperFns...)
	fmt.Fprintf(&b, "from %s.%s import DEFAULT_TIMEOUT, %s\n", g.dom.pkg, m.of.name, strings.Join(fns, ", "))
	fmt.Fprintf(&b, "from %s.testing import make_%s\n\n\n", g.dom.pkg, noun)
	fmt.Fprintf(&b, "@pytest.fixture\ndef sample_%s():\n    return [make_%s(%s=i) for i in range(5)]\n\n\n", plural(noun), noun, attr)
	placed := false
	n := 0
	for b.Len() < m.size || !placed {
		if (n == 2 || b.Len() >= m.size) && !placed {
			for _, bug := range m.bugs {
				b.WriteString(bug.s(strings.Join(bug.tpl.testLines, "\n")))
				b.WriteString("\n\n\n")
			}
			placed = true
			continue
		}
		var fn string
		if len(helperFns) > 0 {
			fn = helperFns[r.IntN(len(helperFns))]
		} else {
			fn = pickR(r, verbs) + "_" + noun
		}
		b.WriteString(g.helper(r, m, testTemplates, []string{"{fn}", fn, "{case}", pickR(r, testCases) + "_" + strconv.Itoa(n)}))
		b.WriteString("\n\n")
		n++
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// helper renders one function or class from templates with names from the module's stream.
func (g *gen) helper(r *rand.Rand, m *module, templates []string, extra []string) string {
	noun := pickR(r, g.dom.nouns)
	verb := pickR(r, verbs)
	fn := verb + "_" + noun
	for i := 2; m.used[fn]; i++ {
		fn = verb + "_" + noun + "_" + strconv.Itoa(i)
	}
	m.used[fn] = true
	pairs := append([]string{}, extra...)
	pairs = append(pairs,
		"{fn}", fn, "{nouns}", plural(noun), "{noun}", noun, "{Verb}", camel(verb),
		"{attr}", pickR(r, g.dom.attrs), "{other}", pickR(r, g.dom.attrs)+"_ref", "{Cls}", pickR(r, g.dom.classes)+pickR(r, []string{"", "View", "Index", "Set", "Spec"}),
		"{const}", strconv.Itoa(r.IntN(90)+10), "{k}", strconv.Itoa(r.IntN(5)+1), "{pkg}", g.dom.pkg,
	)
	return expand(templates[r.IntN(len(templates))], pairs)
}

// expand replaces each {key} of tpl listed in pairs (key, value, key, value, ...) and each
// § with a backtick. It is a cheap strings.Replacer for templates rendered once.
func expand(tpl string, pairs []string) string {
	var b strings.Builder
	b.Grow(len(tpl) + len(tpl)/4)
	for i := 0; i < len(tpl); {
		c := tpl[i]
		if c == '{' {
			if j := strings.IndexByte(tpl[i:], '}'); j > 0 {
				key := tpl[i : i+j+1]
				found := false
				for k := 0; k+1 < len(pairs); k += 2 {
					if pairs[k] == key {
						b.WriteString(pairs[k+1])
						found = true
						break
					}
				}
				if found {
					i += j + 1
					continue
				}
			}
		}
		if strings.HasPrefix(tpl[i:], "§") {
			b.WriteByte('`')
			i += len("§")
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// numbered renders lines [from, to] (1-based, inclusive) as `cat -n` does.
func numbered(src string, from, to int) string {
	lines := strings.Split(strings.TrimRight(src, "\n"), "\n")
	if from < 1 {
		from = 1
	}
	if to > len(lines) || to <= 0 {
		to = len(lines)
	}
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%6d\t%s\n", i, lines[i-1])
	}
	return b.String()
}

func lineCount(src string) int { return strings.Count(strings.TrimRight(src, "\n"), "\n") + 1 }
