package synth

import "strings"

// domain is a fictional Python project the agent works on.
type domain struct {
	repo    string   // repository directory name under /workspace
	pkg     string   // import package
	about   string   // one line for README and prompts
	modules []string // module names under src/{pkg}/
	nouns   []string // singular snake_case nouns of the domain
	attrs   []string // attribute names
	classes []string // class names
	deps    []string // runtime dependencies
}

var domains = []domain{
	{
		repo: "ledgerkit", pkg: "ledgerkit", about: "a small invoicing and bookkeeping library",
		modules: []string{"invoice", "tax", "currency", "ledger", "export", "discounts", "periods", "customers"},
		nouns:   []string{"invoice", "line_item", "tax_rate", "payment", "discount", "ledger_entry", "customer", "period", "credit_note", "account"},
		attrs:   []string{"amount", "quantity", "due_date", "currency", "number", "balance", "rate", "status"},
		classes: []string{"Invoice", "LineItem", "LedgerEntry", "TaxTable", "CurrencyBook", "AccountRegistry"},
		deps:    []string{"python-dateutil", "babel", "pydantic", "click", "tabulate"},
	},
	{
		repo: "tzcron", pkg: "tzcron", about: "a timezone-aware cron scheduler for background jobs",
		modules: []string{"schedule", "cron", "timezones", "runner", "store", "locks", "triggers", "backoff"},
		nouns:   []string{"job", "schedule", "trigger", "run", "deadline", "window", "lock", "retry", "worker", "calendar"},
		attrs:   []string{"next_run", "interval", "timezone", "priority", "attempts", "owner", "deadline", "state"},
		classes: []string{"Job", "CronExpression", "RunRecord", "LockManager", "TriggerSet", "WorkerPool"},
		deps:    []string{"pytz", "tzdata", "croniter", "redis", "structlog"},
	},
	{
		repo: "tablekit", pkg: "tablekit", about: "a CSV and spreadsheet loading toolkit with schema inference",
		modules: []string{"reader", "dialect", "schema", "writer", "cleaning", "types", "sniffing", "validation"},
		nouns:   []string{"row", "column", "header", "dialect", "schema", "field", "record", "cell", "sheet", "batch"},
		attrs:   []string{"name", "width", "dtype", "nullable", "position", "encoding", "delimiter", "quotechar"},
		classes: []string{"Schema", "Column", "Dialect", "RowReader", "SheetWriter", "TypeRegistry"},
		deps:    []string{"chardet", "openpyxl", "numpy", "attrs", "rich"},
	},
	{
		repo: "httpcache", pkg: "httpcache", about: "a caching layer for HTTP clients with RFC 9111 semantics",
		modules: []string{"cache", "client", "headers", "storage", "policy", "retry", "serializer", "freshness"},
		nouns:   []string{"response", "request", "header", "entry", "policy", "session", "key", "validator", "backoff", "vary_rule"},
		attrs:   []string{"ttl", "etag", "status", "max_age", "url", "method", "expires", "stored_at"},
		classes: []string{"CacheEntry", "CachePolicy", "HeaderMap", "FileStorage", "RetryState", "Freshness"},
		deps:    []string{"requests", "urllib3", "msgpack", "filelock", "attrs"},
	},
}

var verbs = []string{
	"compute", "parse", "normalize", "validate", "render", "load", "merge", "resolve", "format",
	"collect", "apply", "build", "split", "group", "filter", "convert", "encode", "decode", "fetch",
	"sync", "schedule", "reconcile", "summarize", "export", "count", "coerce", "expand", "prune",
}

// excAssertion is the exception class of a failed assert: pytest's short summary shows only
// its message, where other exceptions are prefixed with their class.
const excAssertion = "AssertionError"

// failure is how one failing test shows up in pytest and in a traceback.
type failure struct {
	exc      string   // exception class
	msg      string   // exception message (pytest short summary for assertions)
	elines   []string // pytest "E" lines
	inSource bool     // raised inside the library (else: the assert in the test)
	at       string   // the library line that raises, when not the bug line itself
}

// bugTemplate is one kind of bug the agent finds, fails to fix once, then fixes. Texts hold
// placeholders: {fn} {test} {noun} {nouns} {Noun} {attr} {pkg} {mod} {path}.
type bugTemplate struct {
	src         string   // the buggy function as it is in the module
	old         string   // the buggy line
	bad         string   // the first, wrong fix
	good        string   // the right fix
	testLines   []string // the regression test; the last line is the failing one
	orig        failure  // failure before any fix
	badFail     failure  // failure after the wrong fix
	reproLines  []string // body of reproduce_issue.py
	reproOut    string   // its output when the failure is an assertion (not an exception)
	reproOK     string   // its output once fixed
	title       string   // issue title
	report      string   // issue body (markdown)
	cause       string   // root cause, one sentence
	wrongIdea   string   // why the agent tries the wrong fix
	whyWrong    string   // why the wrong fix did not work
	fixIdea     string   // the right approach, as "I'll ... instead" completion
	fixSummary  string   // for the final answer
	extraImport string   // import the good fix needs ("" = none)
}

var bugTemplates = []bugTemplate{
	{
		src: `def {fn}({nouns}, minimum=0):
    """Return how many {nouns} have §§{attr}§§ at or above §§minimum§§."""
    count = 0
    for i in range(1, len({nouns})):
        if {nouns}[i].{attr} >= minimum:
            count += 1
    return count
`,
		old:  "    for i in range(1, len({nouns})):",
		bad:  "    for i in range(0, len({nouns}) - 1):",
		good: "    for i in range(len({nouns})):",
		testLines: []string{
			"def {test}():",
			"    {nouns} = [make_{noun}({attr}=3), make_{noun}({attr}=5), make_{noun}({attr}=7)]",
			"    assert {fn}({nouns}, minimum=1) == 3",
		},
		orig: failure{exc: excAssertion, msg: "assert 2 == 3", elines: []string{
			"assert 2 == 3",
			" +  where 2 = {fn}([<{Noun} {attr}=3>, <{Noun} {attr}=5>, <{Noun} {attr}=7>], minimum=1)",
		}},
		badFail: failure{exc: excAssertion, msg: "assert 2 == 3", elines: []string{
			"assert 2 == 3",
			" +  where 2 = {fn}([<{Noun} {attr}=3>, <{Noun} {attr}=5>, <{Noun} {attr}=7>], minimum=1)",
		}},
		reproLines: []string{
			"from {pkg}.{mod} import {fn}",
			"from {pkg}.testing import make_{noun}",
			"",
			"{nouns} = [make_{noun}({attr}=v) for v in (3, 5, 7)]",
			"print(\"got:\", {fn}({nouns}, minimum=1), \"expected: 3\")",
		},
		reproOut: "got: 2 expected: 3\n",
		reproOK:  "got: 3 expected: 3\n",
		title:    "`{fn}` undercounts by one",
		report: "`{pkg}.{mod}.{fn}` returns one less than it should. With three {nouns} that all have `{attr}` above the minimum it returns 2.\n\n" +
			"§§`python\n>>> from {pkg}.{mod} import {fn}\n>>> {fn}([make_{noun}({attr}=3), make_{noun}({attr}=5), make_{noun}({attr}=7)], minimum=1)\n2\n§§`\n\n" +
			"**Expected:** 3\n**Actual:** 2\n\nOur monthly report is off by one row for every customer, so this is fairly urgent.",
		cause:      "`{fn}` starts its loop at index 1, so the first {noun} in the list is never counted",
		wrongIdea:  "The loop bounds are off. I'll shift the range so it starts at 0.",
		whyWrong:   "I shifted both bounds, so the loop now skips the last {noun} instead of the first and the count is still 2",
		fixIdea:    "iterate over the whole list with `range(len({nouns}))`",
		fixSummary: "`{fn}` skipped the first element because its loop started at index 1; it now iterates over the whole list",
	},
	{
		src: `def {fn}(record):
    """Build a {Noun} from a raw record dict, normalizing text fields."""
    name = record.get("name").strip()
    code = record.get("code", "").upper()
    return {Noun}(name=name, code=code, source=record.get("source", "import"))
`,
		old:  `    name = record.get("name").strip()`,
		bad:  `    name = str(record.get("name")).strip()`,
		good: `    name = (record.get("name") or "").strip()`,
		testLines: []string{
			"def {test}():",
			"    {noun} = {fn}({\"code\": \"ab\", \"name\": None})",
			"    assert {noun}.name == \"\"",
		},
		orig: failure{exc: "AttributeError", msg: "'NoneType' object has no attribute 'strip'", inSource: true, elines: []string{
			"AttributeError: 'NoneType' object has no attribute 'strip'",
		}},
		badFail: failure{exc: excAssertion, msg: "AssertionError: assert 'None' == ''", elines: []string{
			"AssertionError: assert 'None' == ''",
			"  ",
			"  - ",
			"  + None",
		}},
		reproLines: []string{
			"from {pkg}.{mod} import {fn}",
			"",
			"print({fn}({\"code\": \"ab\", \"name\": None}))",
		},
		reproOK: "{Noun}(name='', code='AB', source='import')\n",
		title:   "Importing a {noun} with a null name crashes with AttributeError",
		report: "When a record coming from the API has `\"name\": null`, `{pkg}.{mod}.{fn}` raises instead of treating it as empty:\n\n" +
			"§§`\nTraceback (most recent call last):\n  ...\n  File \"{path}\", line 3, in {fn}\n    name = record.get(\"name\").strip()\nAttributeError: 'NoneType' object has no attribute 'strip'\n§§`\n\n" +
			"A null name should behave like a missing one (empty string). The nightly import job dies on the first such record.",
		cause:      "`record.get(\"name\")` returns None when the key is present with a null value, and `.strip()` is then called on None",
		wrongIdea:  "The simplest change is to convert the value to a string before stripping it.",
		whyWrong:   "`str(None)` is the string 'None', so the crash is gone but the name is now literally \"None\"",
		fixIdea:    "fall back to an empty string with `record.get(\"name\") or \"\"` before calling `.strip()`",
		fixSummary: "`{fn}` crashed on records whose name is null; a null name is now treated as an empty string",
	},
	{
		src: `def {fn}(amount, rate):
    """Return the {noun} for §§amount§§ at §§rate§§, rounded half-up to cents."""
    if amount < 0:
        raise ValueError("amount must not be negative")
    return round(amount * rate, 2)
`,
		old:  "    return round(amount * rate, 2)",
		bad:  "    return round(amount * rate + 0.005, 2)",
		good: "    return float((Decimal(str(amount)) * Decimal(str(rate))).quantize(Decimal(\"0.01\"), rounding=ROUND_HALF_UP))",
		testLines: []string{
			"def {test}():",
			"    assert {fn}(10.0, 0.1) == 1.0",
			"    assert {fn}(10.7, 0.25) == 2.68",
		},
		orig: failure{exc: excAssertion, msg: "assert 2.67 == 2.68", elines: []string{
			"assert 2.67 == 2.68",
			" +  where 2.67 = {fn}(10.7, 0.25)",
		}},
		badFail: failure{exc: excAssertion, msg: "assert 1.01 == 1.0", elines: []string{
			"assert 1.01 == 1.0",
			" +  where 1.01 = {fn}(10.0, 0.1)",
		}},
		reproLines: []string{
			"from {pkg}.{mod} import {fn}",
			"",
			"for amount, rate in [(10.0, 0.1), (10.7, 0.25), (3.335, 1.0)]:",
			"    print(amount, rate, \"->\", {fn}(amount, rate))",
		},
		reproOut:    "10.0 0.1 -> 1.0\n10.7 0.25 -> 2.67\n3.335 1.0 -> 3.33\n",
		reproOK:     "10.0 0.1 -> 1.0\n10.7 0.25 -> 2.68\n3.335 1.0 -> 3.34\n",
		title:       "{Noun} amounts are rounded down on exact half cents",
		report:      "`{pkg}.{mod}.{fn}(10.7, 0.25)` gives `2.67`, but 10.7 x 0.25 = 2.675 should round half-up to `2.68` (that is what our accounting system and the tax office expect).\n\nWe see one-cent differences on roughly 1 in 200 invoices. Please make the rounding exact; floats are probably the problem.",
		cause:       "`round()` works on binary floats, so 2.675 is really 2.67499999... and rounds down; Python's round also uses banker's rounding",
		wrongIdea:   "I'll nudge the value by half a cent before rounding so that exact halves go up.",
		whyWrong:    "adding 0.005 pushes values that were already exact up by a cent (10.0 x 0.1 now gives 1.01), and it is still float arithmetic",
		fixIdea:     "do the multiplication in `Decimal` and quantize to cents with `ROUND_HALF_UP`",
		fixSummary:  "`{fn}` rounded binary floats (and used banker's rounding); it now multiplies in `Decimal` and quantizes half-up to cents",
		extraImport: "from decimal import ROUND_HALF_UP, Decimal",
	},
	{
		src: `def {fn}({noun}, now=None):
    """Return True when §§{noun}§§ is past its deadline."""
    now = now or datetime.now()
    return {noun}.deadline < now
`,
		old:  "    now = now or datetime.now()",
		bad:  "    now = now or datetime.utcnow()",
		good: "    now = now or datetime.now(timezone.utc)",
		testLines: []string{
			"def {test}():",
			"    {noun} = make_{noun}(deadline=datetime(2024, 1, 1, tzinfo=timezone.utc))",
			"    assert {fn}({noun}) is True",
		},
		orig: failure{exc: "TypeError", msg: "can't compare offset-naive and offset-aware datetimes", inSource: true, at: "    return {noun}.deadline < now", elines: []string{
			"TypeError: can't compare offset-naive and offset-aware datetimes",
		}},
		badFail: failure{exc: "TypeError", msg: "can't compare offset-naive and offset-aware datetimes", inSource: true, at: "    return {noun}.deadline < now", elines: []string{
			"TypeError: can't compare offset-naive and offset-aware datetimes",
		}},
		reproLines: []string{
			"from datetime import datetime, timezone",
			"from {pkg}.{mod} import {fn}",
			"from {pkg}.testing import make_{noun}",
			"",
			"{noun} = make_{noun}(deadline=datetime(2024, 1, 1, tzinfo=timezone.utc))",
			"print({fn}({noun}))",
		},
		reproOK:    "True\n",
		title:      "`{fn}` raises TypeError for timezone-aware deadlines",
		report:     "Since we switched all stored deadlines to UTC-aware datetimes, `{pkg}.{mod}.{fn}` fails:\n\n§§`\nTypeError: can't compare offset-naive and offset-aware datetimes\n§§`\n\nEvery deadline we store is aware now, so the default `now` must be aware too. Please fix it without changing the function's signature.",
		cause:      "the default `now` is `datetime.now()`, which is naive, while the stored deadlines are timezone-aware",
		wrongIdea:  "Using UTC for the default should match the stored deadlines, so I'll switch to `datetime.utcnow()`.",
		whyWrong:   "`datetime.utcnow()` returns a naive datetime too (and is deprecated since Python 3.12), so the comparison fails exactly as before",
		fixIdea:    "use an aware default, `datetime.now(timezone.utc)`",
		fixSummary: "`{fn}` compared aware deadlines with a naive `datetime.now()`; the default is now `datetime.now(timezone.utc)`",
	},
	{
		src: `def {fn}(config, {noun}):
    """Return the effective timeout in seconds for §§{noun}§§."""
    timeout = config["timeout"]
    retries = config.get("retries", 3)
    return timeout * (retries + 1)
`,
		old:  `    timeout = config["timeout"]`,
		bad:  `    timeout = config.get("timeout")`,
		good: `    timeout = config.get("timeout", DEFAULT_TIMEOUT)`,
		testLines: []string{
			"def {test}():",
			"    config = {\"retries\": 1}",
			"    assert {fn}(config, make_{noun}()) == 2 * DEFAULT_TIMEOUT",
		},
		orig: failure{exc: "KeyError", msg: "'timeout'", inSource: true, elines: []string{"KeyError: 'timeout'"}},
		badFail: failure{exc: "TypeError", msg: "unsupported operand type(s) for *: 'NoneType' and 'int'", inSource: true, at: "    return timeout * (retries + 1)", elines: []string{
			"TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'",
		}},
		reproLines: []string{
			"from {pkg}.{mod} import {fn}",
			"from {pkg}.testing import make_{noun}",
			"",
			"print({fn}({\"retries\": 1}, make_{noun}()))",
		},
		reproOK:    "60\n",
		title:      "KeyError: 'timeout' when the config file has no timeout",
		report:     "The docs say `timeout` is optional and defaults to 30 seconds, but `{pkg}.{mod}.{fn}` raises `KeyError: 'timeout'` when the key is missing.\n\nSteps: remove `timeout` from `config.yaml`, run any command. Expected: the default timeout is used.",
		cause:      "`{fn}` indexes `config[\"timeout\"]` directly instead of falling back to the documented default",
		wrongIdea:  "I'll read the key with `config.get()` so a missing key does not raise.",
		whyWrong:   "`config.get(\"timeout\")` returns None, and the multiplication then fails with a TypeError",
		fixIdea:    "pass `DEFAULT_TIMEOUT` as the fallback to `config.get`",
		fixSummary: "`{fn}` raised KeyError when `timeout` was not configured; it now falls back to `DEFAULT_TIMEOUT` as documented",
	},
	{
		src: `# Attach the tags plus the {noun}'s own kind and return the tag list.
def {fn}({noun}, tags=[]):
    tags.append({noun}.kind)
    {noun}.tags = tags
    return tags
`,
		old:  "def {fn}({noun}, tags=[]):",
		bad:  "def {fn}({noun}, tags=()):",
		good: "def {fn}({noun}, tags=None):\n    tags = [] if tags is None else list(tags)",
		testLines: []string{
			"def {test}():",
			"    {fn}(make_{noun}(kind=\"a\"))",
			"    assert {fn}(make_{noun}(kind=\"b\")) == [\"b\"]",
		},
		orig: failure{exc: excAssertion, msg: "AssertionError: assert ['a', 'b'] == ['b']", elines: []string{
			"AssertionError: assert ['a', 'b'] == ['b']",
			"  At index 0 diff: 'a' != 'b'",
			"  Left contains one more item: 'b'",
		}},
		badFail: failure{exc: "AttributeError", msg: "'tuple' object has no attribute 'append'", inSource: true, at: "    tags.append({noun}.kind)", elines: []string{
			"AttributeError: 'tuple' object has no attribute 'append'",
		}},
		reproLines: []string{
			"from {pkg}.{mod} import {fn}",
			"from {pkg}.testing import make_{noun}",
			"",
			"print({fn}(make_{noun}(kind=\"a\")))",
			"print({fn}(make_{noun}(kind=\"b\")))",
		},
		reproOut:   "['a']\n['a', 'b']\n",
		reproOK:    "['a']\n['b']\n",
		title:      "Tags leak between {nouns}",
		report:     "After tagging one {noun}, the next {noun} we tag with `{pkg}.{mod}.{fn}` also gets the first one's tags:\n\n§§`python\n>>> {fn}(a)\n['a']\n>>> {fn}(b)\n['a', 'b']\n§§`\n\nEach call should start from an empty list when no tags are passed.",
		cause:      "`tags=[]` is a mutable default argument: the same list is shared by every call",
		wrongIdea:  "An immutable default cannot be shared, so I'll make the default an empty tuple.",
		whyWrong:   "the function appends to `tags`, and a tuple has no `append`",
		fixIdea:    "default to None and build a fresh list inside the function",
		fixSummary: "`{fn}` used a mutable default list shared by all calls; it now defaults to None and copies the tags",
	},
	{
		src: `def {fn}(path):
    """Read a {noun} file and return its lines without newlines."""
    with open(path) as fh:
        return [line.rstrip("\n") for line in fh]
`,
		old:  "    with open(path) as fh:",
		bad:  "    with open(path, errors=\"ignore\") as fh:",
		good: "    with open(path, encoding=\"utf-8\") as fh:",
		testLines: []string{
			"def {test}(tmp_path):",
			"    path = tmp_path / \"{noun}.txt\"",
			"    path.write_text(\"München\\nZürich\\n\", encoding=\"utf-8\")",
			"    assert {fn}(path) == [\"München\", \"Zürich\"]",
		},
		orig: failure{exc: "UnicodeDecodeError", msg: "'ascii' codec can't decode byte 0xc3 in position 1: ordinal not in range(128)", inSource: true, at: "        return [line.rstrip(\"\\n\") for line in fh]", elines: []string{
			"UnicodeDecodeError: 'ascii' codec can't decode byte 0xc3 in position 1: ordinal not in range(128)",
		}},
		badFail: failure{exc: excAssertion, msg: "AssertionError: assert ['Mnchen', 'Zrich'] == ['München', 'Zürich']", elines: []string{
			"AssertionError: assert ['Mnchen', 'Zrich'] == ['München', 'Zürich']",
			"  At index 0 diff: 'Mnchen' != 'München'",
		}},
		reproLines: []string{
			"import pathlib, tempfile",
			"from {pkg}.{mod} import {fn}",
			"",
			"p = pathlib.Path(tempfile.mkdtemp()) / \"{noun}.txt\"",
			"p.write_text(\"München\\n\", encoding=\"utf-8\")",
			"print({fn}(p))",
		},
		reproOK:    "['München']\n",
		title:      "UnicodeDecodeError when reading non-ASCII {noun} files in CI",
		report:     "On our CI runners (LANG=C) `{pkg}.{mod}.{fn}` fails on any file with umlauts:\n\n§§`\nUnicodeDecodeError: 'ascii' codec can't decode byte 0xc3 in position 1: ordinal not in range(128)\n§§`\n\nIt works on developer laptops. Files are always UTF-8.",
		cause:      "`open()` without an encoding uses the locale's encoding, which is ASCII under LANG=C",
		wrongIdea:  "I'll ignore undecodable bytes so the read no longer fails.",
		whyWrong:   "`errors=\"ignore\"` silently drops the non-ASCII characters, so 'München' becomes 'Mnchen'",
		fixIdea:    "open the file with an explicit `encoding=\"utf-8\"`",
		fixSummary: "`{fn}` opened files with the locale encoding; it now reads them as UTF-8 explicitly",
	},
}

// replacer substitutes the placeholders of a bug site into template text.
func replacer(pairs ...string) *strings.Replacer { return strings.NewReplacer(pairs...) }

// camel turns snake_case into CamelCase.
func camel(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "")
}

// plural makes a rough English plural of a snake_case noun.
func plural(s string) string {
	switch {
	case strings.HasSuffix(s, "y") && !strings.HasSuffix(s, "ey"):
		return s[:len(s)-1] + "ies"
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "ch"):
		return s + "es"
	}
	return s + "s"
}
