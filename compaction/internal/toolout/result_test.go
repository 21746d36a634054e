package toolout

import "testing"

// The error line of a result, never the heading above it.
func TestErrorLine(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"traceback", "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\nValueError: bad input\n", "ValueError: bad input"},
		{"chained traceback", "Traceback (most recent call last):\n  File \"a\"\nKeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b\"\nRuntimeError: wrapped\n", "RuntimeError: wrapped"},
		{"pytest summary", "E   AssertionError: first\nFAILED tests/x.py::test_y - AssertionError: first\n1 failed in 0.1s", "FAILED tests/x.py::test_y - AssertionError: first"},
		{"pytest E line", "=== FAILURES ===\n>   assert a == b\nE   AssertionError: assert 1 == 2\n", "AssertionError: assert 1 == 2"},
		{"linter errors", "Your proposed edit has introduced new syntax error(s).\n\nERRORS:\n- E999 SyntaxError: unmatched ')'\n", "E999 SyntaxError: unmatched ')'"},
		{"git error", "error: pathspec 'nope.py' did not match any file(s) known to git", "error: pathspec 'nope.py' did not match any file(s) known to git"},
		{"no module", "/usr/bin/python: No module named sqlfluff", "/usr/bin/python: No module named sqlfluff"},
		{"headings only", "==== ERRORS ====\n-> ERRORS:\nTraceback (most recent call last):\n", ""},
		{"several reported errors", "Created test workgroup\nError creating prepared statement: The create_prepared_statement action has not been implemented\nError listing named queries: The list_named_queries action has not been implemented\n",
			"Error creating prepared statement: The create_prepared_statement action has not been implemented | Error listing named queries: The list_named_queries action has not been implemented"},
		{"success", "All good\n3 passed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := errorLine(c.in, c.in); got != c.want {
				t.Errorf("errorLine = %q, want %q", got, c.want)
			}
		})
	}
}

// A result shown whole names its failing tests too, once: a name the error line already
// holds is not repeated.
func TestExtractiveResultFailingTests(t *testing.T) {
	cases := []struct{ content, failure, outcome string }{
		{"=== RUN   TestA\n--- FAIL: TestA (0.00s)\n=== RUN   TestB\n--- FAIL: TestB/sub (0.00s)\nFAIL\nFAIL\texample.com/x\t0.01s\n",
			"failing: TestA, TestB/sub: FAIL\texample.com/x\t0.01s", "failing: TestA, TestB/sub"},
		{"tests/a.py::test_b FAILED [ 50%]\ntests/a.py::test_c PASSED [100%]\n=== short test summary info ===\nFAILED tests/a.py::test_b - KeyError: 'k'\n=== 1 failed, 1 passed in 0.1s ===\n",
			"FAILED tests/a.py::test_b - KeyError: 'k' (1 failed, 1 passed)", "1 failed, 1 passed: FAILED tests/a.py::test_b - KeyError: 'k'"},
		{"ok\nall good\n", "", "all good"},
	}
	for _, c := range cases {
		r := Read(c.content, true)
		if got := r.Failure(true); got != c.failure {
			t.Errorf("%.40q: failure %q, want %q", c.content, got, c.failure)
		}
		if got := r.Outcome(); got != c.outcome {
			t.Errorf("%.40q: outcome %q, want %q", c.content, got, c.outcome)
		}
	}
}
