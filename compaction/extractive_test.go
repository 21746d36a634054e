package compaction

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// benchSpan is an agent span of n turns: bash and editor calls, some huge results (a
// submitted diff of 800 KB, a pytest run with a traceback), some huge arguments (a file
// created whole).
func benchSpan(n int) []Message {
	msgs := []Message{user("Fix the failing parser test.\n\n## Expected behavior\n- `parse()` accepts nested brackets\n- do not change the public API")}
	big := strings.Repeat("+ a line of a very large diff that the agent staged by accident\n", 800_000/64)
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%d", i)
		var tc ToolCall
		var out string
		switch i % 5 {
		case 0:
			tc = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"command": "cd /repo && python -m pytest tests/test_parser.py -q"}`}}
			out = strings.Repeat("tests/test_parser.py ....F\n", 200) + "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: unbalanced\nFAILED tests/test_parser.py::test_nested - ValueError: unbalanced\n===== 1 failed, 22 passed in 0.49s =====\n"
		case 1:
			tc = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "str_replace_editor", Arguments: `{"command": "create", "path": "/repo/gen_` + id + `.py", "file_text": "` + strings.Repeat(`print(\"x\")\n`, 10_000) + `"}`}}
			out = "File created successfully"
		case 2:
			tc = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"command": "git diff"}`}}
			if i%50 == 2 {
				out = "diff --git a/src/parser.py b/src/parser.py\n" + big
			} else {
				out = "diff --git a/src/parser.py b/src/parser.py\n+ok\n"
			}
		case 3:
			tc = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "str_replace_editor", Arguments: `{"command": "str_replace", "path": "/repo/src/parser.py", "old_str": "a", "new_str": "b"}`}}
			out = "The file /repo/src/parser.py has been edited."
		default:
			tc = ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: "bash", Arguments: `{"command": "cat src/parser.py"}`}}
			out = strings.Repeat("def parse(tokens):\n", 2000)
		}
		msgs = append(msgs, Message{Role: RoleAssistant, Content: "I'll use a stack instead of a regex because nesting is unbounded. " + strings.Repeat("Thinking about it. ", 50), ToolCalls: []ToolCall{tc}},
			Message{Role: RoleTool, ToolCallID: id, Content: out})
	}
	return msgs
}

func BenchmarkExtractiveSummarize(b *testing.B) {
	for _, n := range []int{100, 2000} {
		span := benchSpan(n)
		prev := strings.Repeat("- assistant: an earlier line of the timeline\n", 200)
		b.Run(fmt.Sprintf("turns=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (ExtractiveSummarizer{}).Summarize(context.Background(), SummaryRequest{Messages: span, PreviousSummary: prev, MaxSummaryChars: 6000}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Builders for hand-written agent histories.

func tcall(id, name, args string) ToolCall {
	return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
}

func jsonArgs(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func asstCalls(content string, calls ...ToolCall) Message {
	return Message{Role: RoleAssistant, Content: content, ToolCalls: calls}
}

// summarize runs the extractive summarizer and parses its output, failing the test unless
// the output parses back exactly (no parse error, the same anchors when formatted again).
func summarize(t *testing.T, req SummaryRequest) (map[AnchorType]string, string) {
	t.Helper()
	out, err := ExtractiveSummarizer{}.Summarize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	anchors, summary, err := ParseAnchorsAndSummary(out)
	if err != nil {
		t.Fatalf("the extractive output does not parse cleanly: %v\n%s", err, out)
	}
	if want := "## Anchors\n" + formatAnchors(anchors) + "\n## Summary\n"; !strings.HasPrefix(out, want) {
		t.Fatalf("the extractive anchors do not parse back exactly:\n%s\nreformatted:\n%s", out, want)
	}
	for _, a := range anchors {
		if len(a.Content) > anchorMaxChars(a.Type) {
			t.Fatalf("%s is %d bytes", a.Type, len(a.Content))
		}
	}
	if max := req.MaxSummaryChars; max > 0 && len(summary) > max {
		t.Fatalf("summary %d bytes, over %d", len(summary), max)
	}
	return anchorMap(anchors), summary
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

func mustNotContain(t *testing.T, what, got string, bad ...string) {
	t.Helper()
	for _, b := range bad {
		if strings.Contains(got, b) {
			t.Errorf("%s holds %q:\n%s", what, b, got)
		}
	}
}

// A classic SWE-agent run: a demonstration user message first, the task next; commands
// open/create/edit typed into a bash tool; results with "(Open file: ...)" footers.
func sweAgentHistory() []Message {
	bash := func(id, cmd string) ToolCall { return tcall(id, "bash", jsonArgs("command", cmd)) }
	return []Message{
		sys("SETTING: You are an autonomous programmer."),
		user("Here is a demonstration of how to correctly accomplish this task.\nIt is included to show you how to correctly use the interface.\n--- DEMONSTRATION ---\nISSUE:\nTimeDelta serialization precision\n" + strings.Repeat("demo text\n", 80) + "--- END OF DEMONSTRATION ---"),
		user("We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\nPixel Representation attribute should be optional for pixel data handler\n**Describe the bug**\r\nThe NumPy pixel data handler currently requires the Pixel Representation attribute.\r\n\r\n**Expected behavior**\r\nI would expect the `Dataset.pixel_array` property to decode Float Pixel Data without the Pixel Representation element.\r\n\r\n**Steps To Reproduce**\r\n```python\r\nds = Dataset()\r\n```\r\n\r\nINSTRUCTIONS:\nNow, you're going to solve this issue on your own. Remember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME.\n" + strings.Repeat("More instructions about the interface.\n", 20)),
		asstCalls("First, I'll create a new Python script to reproduce the bug as described in the issue.\n\n```\ncreate reproduce_bug.py\n```", bash("s1", "create reproduce_bug.py")),
		result("s1", "[File: /repo/reproduce_bug.py (1 lines total)]\n1:\n\n(Open file: /repo/reproduce_bug.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("Now let's paste in the example code.\n\n```\nedit 1:1\nimport numpy\nend_of_edit\n```", bash("s2", "edit 1:1\nimport numpy\nend_of_edit")),
		result("s2", "[File: /repo/reproduce_bug.py (18 lines total)]\n1:import numpy\n(Open file: /repo/reproduce_bug.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("Let's run the script.\n\n```\npython reproduce_bug.py\n```", bash("s3", "python reproduce_bug.py")),
		result("s3", "Traceback (most recent call last):\n  File \"/repo/reproduce_bug.py\", line 17, in <module>\n    result = ds.pixel_array\n  File \"/repo/pydicom/pixel_data_handlers/numpy_handler.py\", line 293, in get_pixeldata\n    raise AttributeError(\nAttributeError: Unable to convert the pixel data as the following required elements are missing from the dataset: PixelRepresentation\n\n(Open file: /repo/reproduce_bug.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("Let's open the handler.\n\n```\nopen pydicom/pixel_data_handlers/numpy_handler.py 293\n```", bash("s4", "open pydicom/pixel_data_handlers/numpy_handler.py 293")),
		result("s4", "[File: /repo/pydicom/pixel_data_handlers/numpy_handler.py (372 lines total)]\n287:    required_elements = [\n288:        'PixelRepresentation',\n289:    raise AttributeError('error: missing')\n(Open file: /repo/pydicom/pixel_data_handlers/numpy_handler.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("'PixelRepresentation' should not be required for Float Pixel Data. We need to modify this check to require it only when 'PixelData' is present, because float data has no sign.\n\n```\nedit 287:295\n    ]\nend_of_edit\n```", bash("s5", "edit 287:295\n    ]\nend_of_edit")),
		result("s5", "Your proposed edit has introduced new syntax error(s). Please understand the fixes and retry your edit "+"commm"+"and.\n\nERRORS:\n- E999 SyntaxError: unmatched ']'\n\nThis is how your edit would have looked if applied\n[File: /repo/pydicom/pixel_data_handlers/numpy_handler.py (373 lines total)]\n(Open file: /repo/pydicom/pixel_data_handlers/numpy_handler.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("I will correct the syntax and try again.\n\n```\nedit 287:296\n    required_elements = []\nend_of_edit\n```", bash("s6", "edit 287:296\n    required_elements = []\nend_of_edit")),
		result("s6", "[File: /repo/pydicom/pixel_data_handlers/numpy_handler.py (373 lines total)]\n287:    required_elements = []\n(Open file: /repo/pydicom/pixel_data_handlers/numpy_handler.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("Let's run the test:\n\n```\npython reproduce_bug.py\n```", bash("s7", "python reproduce_bug.py")),
		result("s7", "Script completed successfully, no errors. Result: True\n\n(Open file: /repo/pydicom/pixel_data_handlers/numpy_handler.py)\n(Current directory: /repo)\nbash-$"),
		asstCalls("The bug is fixed. Now let's remove the reproduction script and then submit the change.\n\n```\nrm reproduce_bug.py\n```", bash("s8", "rm reproduce_bug.py")),
		result("s8", "Your command ran successfully and did not produce any output.\n(Open file: /repo/pydicom/pixel_data_handlers/numpy_handler.py)\n(Current directory: /repo)\nbash-$"),
	}
}

func TestExtractiveSWEAgent(t *testing.T) {
	m, summary := summarize(t, SummaryRequest{Messages: sweAgentHistory()[1:], MaxSummaryChars: 3000})
	intent := m[AnchorUserIntent]
	if !strings.HasPrefix(intent, "- Pixel Representation attribute should be optional for pixel data handler\n") {
		t.Errorf("user_intent does not start with the task's title:\n%s", intent)
	}
	mustContain(t, "user_intent", intent, "`Dataset.pixel_array` property to decode Float Pixel Data", "YOU CAN ONLY ENTER ONE COMMAND AT A TIME")
	mustNotContain(t, "user_intent", intent, "TimeDelta", "demonstration")
	progress := m[AnchorExecutionProgress]
	mustContain(t, "execution_progress", progress,
		"files edited: /repo/pydicom/pixel_data_handlers/numpy_handler.py; created: reproduce_bug.py; deleted: reproduce_bug.py",
		"tool calls: bash x8",
		"python reproduce_bug.py -> AttributeError: Unable to convert the pixel data",
		"python reproduce_bug.py -> Script completed successfully, no errors. Result: True")
	tried := m[AnchorTriedSolution]
	mustContain(t, "tried_solution", tried,
		"edit 287:295 (/repo/pydicom/pixel_data_handlers/numpy_handler.py) -> E999 SyntaxError: unmatched ']'",
		"python reproduce_bug.py -> AttributeError: Unable to convert the pixel data as the following required elements are missing")
	mustNotContain(t, "tried_solution", tried, "Traceback (most recent call last)", "ERRORS:", "error: missing")
	mustContain(t, "key_decision", m[AnchorKeyDecision], "We need to modify this check to require it only when 'PixelData' is present, because float data has no sign.")
	mustNotContain(t, "key_decision", m[AnchorKeyDecision], "First, I'll create", "Let's run the test")
	mustContain(t, "next_step", m[AnchorNextStep], "remove the reproduction script and then submit the change", "(last action: rm reproduce_bug.py)")
	mustContain(t, "summary", summary, "Compacted 18 messages (2 user, 8 assistant, 8 tool results, 0 offloaded).", "- user: Here is a demonstration")
}

// mini-swe-agent (v1): text actions converted to a bash tool, results with <returncode>, the
// harness's format reminder as a user message whenever the model wrote two actions.
func miniSWEHistory() []Message {
	bash := func(id, cmd string) ToolCall { return tcall(id, "bash", jsonArgs("command", cmd)) }
	nag := func(n int) Message {
		return user(fmt.Sprintf("Please always provide EXACTLY ONE action in triple backticks, found %d actions.\n\nPlease format your action in triple backticks as shown in <response_example>.", n))
	}
	rc := func(code int, out string) string {
		return fmt.Sprintf("<returncode>%d</returncode>\n<output>\n%s</output>", code, out)
	}
	return []Message{
		sys("You are a helpful assistant that can interact multiple times with a computer shell."),
		user("<pr_description>\nConsider the following PR description:\nTIME_ZONE value in DATABASES settings is not used when making dates timezone-aware on MySQL, SQLite, and Oracle.\nDescription\n" + strings.Repeat("Some context about the report.\n", 10) +
			"Two things are wrong. First, conversion should be from Paris to Paris, instead of UTC to Paris.\n</pr_description>\n\n<instructions>\n# Task Instructions\n" + strings.Repeat("You'll be helping implement changes.\n", 5) +
			"**CRITICAL REQUIREMENTS:**\n- Your response MUST include EXACTLY ONE bash code block\n- Directory or environment variable changes are not persistent.\n\n<example_response>\nTHOUGHT: I must look first.\n</example_response>\n</instructions>"),
		asstCalls("THOUGHT: Let me look at the operations file.\n\n```bash\nnl -ba django/db/backends/mysql/operations.py | sed -n '40,60p'\n```", bash("m1", "nl -ba django/db/backends/mysql/operations.py | sed -n '40,60p'")),
		result("m1", rc(0, "    40\t# Override the value\n")),
		asstCalls("THOUGHT: I'll check two things.\n\n```bash\nls\n```\n\n```bash\npwd\n```"),
		nag(2),
		asstCalls("THOUGHT: I will write a reproduction script.\n\n```bash\ncat <<'EOF' > reproduce_issue.py\nimport django\nprint('x')\nEOF\npython3 reproduce_issue.py\n```", bash("m2", "cat <<'EOF' > reproduce_issue.py\nimport django\nprint('x')\nEOF\npython3 reproduce_issue.py")),
		result("m2", rc(1, "Traceback (most recent call last):\n  File \"/testbed/django/db/backends/utils.py\", line 84, in _execute\n    return self.cursor.execute(sql, params)\nsqlite3.OperationalError: user-defined function raised exception\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \"reproduce_issue.py\", line 2, in <module>\ndjango.db.utils.OperationalError: user-defined function raised exception\n")),
		asstCalls("THOUGHT: Two blocks again.\n\n```bash\nls\n```\n\n```bash\nls\n```\n\n```bash\nls\n```"),
		nag(3),
		user("Also keep the metrics name `db_tz_conversions` unchanged, dashboards depend on it."),
		asstCalls("THOUGHT: I'll use a python script to apply the change instead of sed, because sed mangles the indentation.\n\n```bash\npython3 - <<'EOF'\nsrc = open('django/db/backends/sqlite3/base.py').read()\nwith open('django/db/backends/sqlite3/base.py', 'w') as f:\n    f.write(src)\nEOF\n```", bash("m3", "python3 - <<'EOF'\nsrc = open('django/db/backends/sqlite3/base.py').read()\nwith open('django/db/backends/sqlite3/base.py', 'w') as f:\n    f.write(src)\nEOF")),
		result("m3", rc(0, "")),
		asstCalls("THOUGHT: Fix the MySQL backend too.\n\n```bash\nsed -i 's/UTC/%s/' django/db/backends/mysql/operations.py && echo done\n```", bash("m4", "sed -i 's/UTC/%s/' django/db/backends/mysql/operations.py && echo done")),
		result("m4", rc(0, "done\n")),
		asstCalls("THOUGHT: Run the tests.\n\n```bash\ncd /testbed && python -m pytest tests/timezones -q\n```", bash("m5", "cd /testbed && python -m pytest tests/timezones -q")),
		result("m5", rc(1, "..F.\n=================================== FAILURES ===================================\n___ test_query_filter ___\n\n>       assert qs.exists()\nE       AssertionError: assert False\n\ntests/timezones/tests.py:42: AssertionError\n=========================== short test summary info ============================\nFAILED tests/timezones/tests.py::NewDatabaseTests::test_query_filter - AssertionError: assert False\n1 failed, 3 passed in 0.12s\n")),
		asstCalls("THOUGHT: Another format slip.\n\n```bash\nls\n```\n\n```bash\nls\n```"),
		nag(2),
		asstCalls("THOUGHT: grep for CONVERT_TZ.\n\n```bash\ngrep -rn CONVERT_TZ django/db/backends/oracle\n```", bash("m6", "grep -rn CONVERT_TZ django/db/backends/oracle")),
		result("m6", rc(1, "")),
		asstCalls("THOUGHT: The failing test filters by date. Next I need to pass the database time zone to `_sqlite_datetime_parse` and rerun the timezones tests.\n\n```bash\nnl -ba django/db/backends/sqlite3/base.py | sed -n '400,420p'\n```", bash("m7", "nl -ba django/db/backends/sqlite3/base.py | sed -n '400,420p'")),
		result("m7", rc(0, "   401\tdef _sqlite_datetime_parse(dt, tzname=None):\n")),
	}
}

func TestExtractiveMiniSWEAgent(t *testing.T) {
	m, _ := summarize(t, SummaryRequest{Messages: miniSWEHistory()[1:], MaxSummaryChars: 3000})
	intent := m[AnchorUserIntent]
	if !strings.HasPrefix(intent, "- TIME_ZONE value in DATABASES settings is not used when making dates timezone-aware on MySQL, SQLite, and Oracle.\n") {
		t.Errorf("user_intent does not start with the task:\n%s", intent)
	}
	mustContain(t, "user_intent", intent,
		"First, conversion should be from Paris to Paris, instead of UTC to Paris.",
		"Your response MUST include EXACTLY ONE bash code block",
		"later: Also keep the metrics name `db_tz_conversions` unchanged, dashboards depend on it.")
	if n := strings.Count(intent, "Please always provide EXACTLY ONE action"); n != 1 {
		t.Errorf("the harness's reminder is in user_intent %d times, want once:\n%s", n, intent)
	}
	mustNotContain(t, "user_intent", intent, "I must look first")
	progress := m[AnchorExecutionProgress]
	mustContain(t, "execution_progress", progress,
		"files edited: django/db/backends/sqlite3/base.py, django/db/backends/mysql/operations.py; created: reproduce_issue.py",
		"python -m pytest tests/timezones -q -> exit 1: 1 failed, 3 passed: FAILED tests/timezones/tests.py::NewDatabaseTests::test_query_filter - AssertionError: assert False",
		"cat <<'EOF' > reproduce_issue.py; python3 reproduce_issue.py -> exit 1: django.db.utils.OperationalError: user-defined function raised exception")
	mustNotContain(t, "execution_progress", progress, "grep -rn", "read: django/db/backends/mysql/operations.py")
	tried := m[AnchorTriedSolution]
	mustContain(t, "tried_solution", tried,
		"-> django.db.utils.OperationalError: user-defined function raised exception",
		"python -m pytest tests/timezones -q -> FAILED tests/timezones/tests.py::NewDatabaseTests::test_query_filter - AssertionError: assert False (1 failed, 3 passed)")
	mustNotContain(t, "tried_solution", tried, "grep", "Traceback (most recent call last)")
	mustContain(t, "key_decision", m[AnchorKeyDecision], "I'll use a python script to apply the change instead of sed, because sed mangles the indentation.")
	mustContain(t, "next_step", m[AnchorNextStep], "Next I need to pass the database time zone to `_sqlite_datetime_parse` and rerun the timezones tests.")
}

// OpenHands: native tool calls (str_replace_editor, execute_bash), results ending with the
// interpreter's prompt and "[Command finished with exit code N]", a continuation nag.
func openHandsHistory() []Message {
	ed := func(id string, kv ...string) ToolCall { return tcall(id, "str_replace_editor", jsonArgs(kv...)) }
	sh := func(id, cmd string) ToolCall { return tcall(id, "execute_bash", jsonArgs("command", cmd)) }
	prompt := "[Python Interpreter: /opt/miniconda3/envs/testbed/bin/python]\nroot@openhands-workspace:/workspace/repo # \n[Command finished with exit code %d]"
	nag := "Please continue working on the task on whatever approach you think is suitable.\nIf you think you have solved the task, please first send your answer to user through message and then finish the interaction.\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP."
	return []Message{
		sys("You are a helpful assistant that can interact with a computer to solve tasks."),
		user("<uploaded_files>\n/workspace/repo\n</uploaded_files>\nI've uploaded a python code repository in the directory repo. Consider the following PR description:\n\n<pr_description>\n`mode` of Evaluator can't work with string input\n**Describe the bug**\nSupervisedEvaluator checks for ForwardMode.EVAL or ForwardMode.TRAIN and rejects the string \"train\".\n</pr_description>\n\nCan you help me implement the necessary changes to the repository so that the requirements specified in the <pr_description> are met?\nYour task is to make the minimal changes to non-tests files in the /repo directory to ensure the <pr_description> is satisfied."),
		asstCalls("", ed("o1", "command", "view", "path", "/workspace/repo")),
		result("o1", "OBSERVATION:\nHere's the files and directories up to 2 levels deep in /workspace/repo"),
		asstCalls("", ed("o2", "command", "view", "path", "/workspace/repo/monai/engines/evaluator.py")),
		result("o2", "OBSERVATION:\nHere's the result of running `cat -n` on /workspace/repo/monai/engines/evaluator.py:\n   120\t        elif mode == ForwardMode.TRAIN:\n   123\t            raise ValueError(f\"unsupported mode: {mode}, should be 'eval' or 'train'.\")"),
		asstCalls("", ed("o3", "command", "create", "path", "/workspace/repo/reproduce_error.py", "file_text", "from monai.engines import Evaluator\n")),
		result("o3", "OBSERVATION:\nFile created successfully at: /workspace/repo/reproduce_error.py"),
		asstCalls("", sh("o4", "python /workspace/repo/reproduce_error.py")),
		result("o4", "OBSERVATION:\npython /workspace/repo/reproduce_error.py\r\nTraceback (most recent call last):\r\n  File \"/workspace/repo/reproduce_error.py\", line 13, in <module>\r\n    evaluator = Evaluator(\r\nValueError: unsupported mode: train, should be 'eval' or 'train'."+fmt.Sprintf(prompt, 1)),
		asstCalls("The check compares against the enum; I'll convert the string with `look_up_option` instead of comparing strings, since the enum already lists the valid modes.", ed("o5", "command", "str_replace", "path", "/workspace/repo/monai/engines/evaluator.py", "old_str", "if mode == ForwardMode.EVAL:", "new_str", "mode = look_up_option(mode, ForwardMode)")),
		result("o5", "OBSERVATION:\nThe file /workspace/repo/monai/engines/evaluator.py has been edited. Here's the result of running `cat -n` on a snippet:\n   121\t    raise ValueError('error: this text is file content')"),
		asstCalls("", ed("o6", "command", "str_replace", "path", "/workspace/repo/monai/engines/workflow.py", "old_str", "nope", "new_str", "x")),
		result("o6", "OBSERVATION:\nERROR:\nNo replacement was performed, old_str `nope` did not appear verbatim in /workspace/repo/monai/engines/workflow.py."),
		asstCalls("", sh("o7", "python /workspace/repo/reproduce_error.py")),
		result("o7", "OBSERVATION:\npython /workspace/repo/reproduce_error.py\r\nEvaluation finished\r\n"+fmt.Sprintf(prompt, 0)),
		asstCalls("The mode parameter now accepts strings."),
		user(nag),
		asstCalls("I will also check the edge cases.", sh("o8", "python -m pytest tests/test_evaluator.py -q")),
		result("o8", "OBSERVATION:\n....\r\n4 passed in 1.02s\r\n"+fmt.Sprintf(prompt, 0)),
		asstCalls("All tests pass."),
		user(nag),
	}
}

func TestExtractiveOpenHands(t *testing.T) {
	m, summary := summarize(t, SummaryRequest{Messages: openHandsHistory()[1:], MaxSummaryChars: 3000})
	intent := m[AnchorUserIntent]
	mustContain(t, "user_intent", intent, "- `mode` of Evaluator can't work with string input\n", "Your task is to make the minimal changes to non-tests files")
	if n := strings.Count(intent, "Please continue working on the task"); n != 1 {
		t.Errorf("the continuation nag is in user_intent %d times, want once:\n%s", n, intent)
	}
	progress := m[AnchorExecutionProgress]
	mustContain(t, "execution_progress", progress,
		"files edited: /workspace/repo/monai/engines/evaluator.py; created: /workspace/repo/reproduce_error.py",
		"tool calls: str_replace_editor x5, execute_bash x3",
		"python /workspace/repo/reproduce_error.py -> exit 1: ValueError: unsupported mode: train, should be 'eval' or 'train'.",
		"python /workspace/repo/reproduce_error.py -> exit 0: Evaluation finished",
		"python -m pytest tests/test_evaluator.py -q -> exit 0: 4 passed")
	mustNotContain(t, "execution_progress", progress, "workflow.py", "read: /workspace/repo,", "[Python Interpreter")
	tried := m[AnchorTriedSolution]
	mustContain(t, "tried_solution", tried,
		"str_replace_editor str_replace /workspace/repo/monai/engines/workflow.py -> No replacement was performed, old_str `nope` did not appear verbatim",
		"python /workspace/repo/reproduce_error.py -> ValueError: unsupported mode: train, should be 'eval' or 'train'.")
	mustNotContain(t, "tried_solution", tried, "file content", "Python Interpreter")
	mustContain(t, "key_decision", m[AnchorKeyDecision], "I'll convert the string with `look_up_option` instead of comparing strings")
	mustContain(t, "next_step", m[AnchorNextStep], "I will also check the edge cases.")
	mustContain(t, "summary", summary, "  -> python /workspace/repo/reproduce_error.py (")
}

// SWE-agent with native tool calls (SWE-smith, Claude): "Expected behavior" list and API
// names in the task, pytest's verbose output, boilerplate narration.
func TestExtractiveSWEAgentToolCalls(t *testing.T) {
	ed := func(id string, kv ...string) ToolCall { return tcall(id, "str_replace_editor", jsonArgs(kv...)) }
	sh := func(id, cmd string) ToolCall { return tcall(id, "bash", jsonArgs("command", cmd)) }
	task := "<uploaded_files>\n/testbed\n</uploaded_files>\nI've uploaded a python code repository in the directory /testbed. Consider the following PR description:\n\n<pr_description>\n# Missing primary workgroup and prepared statements functionality in Athena\n\n## Describe the bug\n\n1. The primary workgroup doesn't seem to be created by default\n2. Prepared statements functionality appears to be missing\n\n## How to Reproduce\n\n```python\nclient.get_work_group(WorkGroup='primary')\n```\n\n## Expected behavior\n\n1. The primary workgroup should be created by default\n2. The prepared statements functionality should work (create_prepared_statement and get_prepared_statement)\n3. The list_named_queries method should return the correct list of named queries\n\n## Environment info\n\n- Python version: 3.9\n</pr_description>\n\nCan you help me implement the necessary changes?\nYour task is to make the minimal changes to non-tests files in the /testbed directory to ensure the <pr_description> is satisfied.\nFollow these steps to resolve the issue:\n1. As a first step, it might be a good idea to find and read code relevant to the <pr_description>\n2. Create a script to reproduce the error and execute it with `python <filename.py>` using the bash tool, to confirm the error"
	pytestOut := "OBSERVATION:\n============================= test session starts ==============================\r\ntests/test_athena/test_athena.py::test_create_work_group PASSED [  4%]\r\n" +
		strings.Repeat("tests/test_athena/test_athena.py::test_x PASSED [ 50%]\r\n", 20) +
		"    def list_named_queries(self, workgroup):\r\n>       if query.workgroup and query.workgroup.name == workgroup\r\nE       AttributeError: 'str' object has no attribute 'name'\r\n\r\nmoto/athena/models.py:399: AttributeError\r\n=========================== short test summary info ============================\r\nFAILED tests/test_athena/test_athena.py::test_list_named_queries - AttributeError: 'str' object has no attribute 'name'\r\n========================= 1 failed, 22 passed in 0.49s =========================\r\n"
	msgs := []Message{
		user(task),
		asstCalls("I'll help you implement the necessary changes. Let's start by exploring the repository.", ed("a1", "command", "view", "path", "/testbed/moto/athena/models.py")),
		result("a1", "OBSERVATION:\nHere's the result of running `cat -n` on /testbed/moto/athena/models.py:\n     1\timport time"),
		asstCalls("Now, let's add the `PreparedStatement` class:\n\n<function=str_replace_editor>\n<parameter=command>str_replace</parameter>", ed("a2", "command", "str_replace", "path", "/testbed/moto/athena/models.py", "old_str", "a", "new_str", "b")),
		result("a2", "OBSERVATION:\nThe file /testbed/moto/athena/models.py has been edited."),
		asstCalls("Let's run the test:", sh("a3", "cd /testbed && python -m pytest tests/test_athena/test_athena.py -v")),
		result("a3", pytestOut),
		asstCalls("The issue is that we're passing the workgroup name as a string to the NamedQuery constructor, but we need to pass the WorkGroup object.", ed("a4", "command", "str_replace", "path", "/testbed/moto/athena/models.py", "old_str", "c", "new_str", "d")),
		result("a4", "OBSERVATION:\nThe file /testbed/moto/athena/models.py has been edited."),
		asstCalls("Now let's run the tests again:", sh("a5", "cd /testbed && python -m pytest tests/test_athena/test_athena.py -v")),
		result("a5", "OBSERVATION:\n============================== 23 passed in 0.32s ==============================\r\n"),
	}
	m, _ := summarize(t, SummaryRequest{Messages: msgs, MaxSummaryChars: 3000})
	intent := m[AnchorUserIntent]
	mustContain(t, "user_intent", intent,
		"- Missing primary workgroup and prepared statements functionality in Athena\n",
		"The primary workgroup should be created by default",
		"The prepared statements functionality should work (create_prepared_statement and get_prepared_statement)",
		"The list_named_queries method should return the correct list of named queries",
		"Your task is to make the minimal changes to non-tests files in the /testbed directory")
	mustNotContain(t, "user_intent", intent, "uploaded_files", "Python version", "Can you help me")
	mustContain(t, "execution_progress", m[AnchorExecutionProgress],
		"files edited: /testbed/moto/athena/models.py",
		"python -m pytest tests/test_athena/test_athena.py -v -> 1 failed, 22 passed: FAILED tests/test_athena/test_athena.py::test_list_named_queries - AttributeError: 'str' object has no attribute 'name'",
		"python -m pytest tests/test_athena/test_athena.py -v -> 23 passed")
	mustContain(t, "tried_solution", m[AnchorTriedSolution], "FAILED tests/test_athena/test_athena.py::test_list_named_queries - AttributeError: 'str' object has no attribute 'name' (1 failed, 22 passed)")
	decisions := m[AnchorKeyDecision]
	mustContain(t, "key_decision", decisions, "The issue is that we're passing the workgroup name as a string to the NamedQuery constructor, but we need to pass the WorkGroup object.")
	mustNotContain(t, "key_decision", decisions, "Let's run the test", "Let's start by exploring", "PreparedStatement")
	mustContain(t, "next_step", m[AnchorNextStep], "let's run the tests again")
}

// A span after the first compaction: the task is in the previous anchors, so the user
// messages here are later instructions, and the previous anchors are not repeated (the
// engine merges them).
func TestExtractiveDescribesOnlyItsSpan(t *testing.T) {
	prev := []Anchor{{AnchorUserIntent, "Fix the failing parser test."}, {AnchorExecutionProgress, "- files edited: parser.py\n- earlier progress"}}
	span := []Message{
		user("Also keep the public API unchanged."),
		asstCalls("Running the tests.", tcall("c1", "bash", jsonArgs("command", "pytest -q"))),
		result("c1", "3 passed in 0.1s"),
	}
	m, summary := summarize(t, SummaryRequest{Messages: span, PreviousAnchors: prev, PreviousSummary: "Compacted 40 messages (1 user, 20 assistant, 19 tool results, 0 offloaded).\n- user: Fix the failing parser test.", MaxSummaryChars: 2000})
	if m[AnchorUserIntent] != "later: Also keep the public API unchanged." {
		t.Errorf("user_intent %q", m[AnchorUserIntent])
	}
	mustNotContain(t, "execution_progress", m[AnchorExecutionProgress], "earlier progress", "Earlier:", "parser.py")
	mustContain(t, "execution_progress", m[AnchorExecutionProgress], "pytest -q -> 3 passed")
	if m[AnchorNextStep] != "Running the tests. (last action: pytest -q)" { // no plan stated: what was said last
		t.Errorf("next_step %q", m[AnchorNextStep])
	}
	mustContain(t, "summary", summary, "Compacted 3 messages (1 user, 1 assistant, 1 tool results, 0 offloaded); 40 before that.\n- user: Fix the failing parser test.\n- user: Also keep")
	// Short status questions are no instructions.
	m, _ = summarize(t, SummaryRequest{Messages: []Message{user("Any progress?")}, PreviousAnchors: prev})
	if m[AnchorUserIntent] != notAvailable {
		t.Errorf("a status question became an instruction: %q", m[AnchorUserIntent])
	}
}

// Chained compactions as the engine runs them (summarize each span, merge into the
// anchors, feed the summary back): anchors and summary stay bounded and flat, the task
// first, the oldest and newest entries kept.
func TestExtractiveChainStaysBoundedAndFlat(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	full := genHistory(r, 600)
	var anchors []Anchor
	summary := ""
	for start := 2; start < len(full); {
		end := min(start+15, len(full))
		for end < len(full) && full[end].Role == RoleTool {
			end++
		}
		out, err := ExtractiveSummarizer{}.Summarize(context.Background(), SummaryRequest{Messages: full[start:end], PreviousAnchors: anchors, PreviousSummary: summary, MaxSummaryChars: 2500})
		if err != nil {
			t.Fatal(err)
		}
		if start == 2 { // the first span holds the task
			out, err = ExtractiveSummarizer{}.Summarize(context.Background(), SummaryRequest{Messages: full[1:end], MaxSummaryChars: 2500})
			if err != nil {
				t.Fatal(err)
			}
		}
		parsed, s, err := ParseAnchorsAndSummary(out)
		if err != nil {
			t.Fatalf("span %d: %v", start, err)
		}
		anchors, summary = mergeAnchors(anchors, parsed), s
		if len(summary) > 2500 || strings.Contains(summary, "Before that") || strings.Count(summary, "lines elided") > 1 {
			t.Fatalf("span %d: summary %d bytes, nested or with several elisions:\n%s", start, len(summary), summary)
		}
		start = end
	}
	m := anchorMap(anchors)
	intent := splitItems(m[AnchorUserIntent]).items
	if len(intent) < 2 || intent[0] != "Fix the failing test in parser.go; keep the public API unchanged." {
		t.Errorf("user_intent: %q", m[AnchorUserIntent])
	}
	n := 0
	for _, it := range intent {
		if strings.Contains(it, "please also check the docs") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the repeated interjection is in user_intent %d times: %q", n, m[AnchorUserIntent])
	}
	for _, a := range anchors {
		if len(a.Content) > anchorMaxChars(a.Type) || strings.Count(a.Content, "elided ...]") > 1 || strings.Contains(a.Content, "Earlier:") {
			t.Errorf("%s: %d bytes: %q", a.Type, len(a.Content), a.Content)
		}
	}
	if !strings.HasPrefix(summary, "Compacted ") || !strings.Contains(summary, "- user: Fix the failing test in parser.go") {
		t.Errorf("the summary lost its oldest line: %q", summary[:min(300, len(summary))])
	}
}

func TestExtractiveDeterministic(t *testing.T) {
	req := SummaryRequest{Messages: miniSWEHistory(), MaxSummaryChars: 2000}
	a, _ := ExtractiveSummarizer{}.Summarize(context.Background(), req)
	for range 5 {
		if b, _ := (ExtractiveSummarizer{}).Summarize(context.Background(), req); b != a {
			t.Fatal("extractive summary is not deterministic")
		}
	}
}

// The files a shell command reads and writes.
func TestShellTrail(t *testing.T) {
	cases := []struct{ cmd, want string }{
		{"cat src/a.py", "files read: src/a.py"},
		{"nl -ba src/a.py | sed -n '10,20p'", "files read: src/a.py"},
		{"sed -n '1,5p' src/a.py src/b.py", "files read: src/a.py, src/b.py"},
		{"sed -i 's/a/b/' src/a.py", "files edited: src/a.py"},
		{"sed -i -e 's/a/b/' -e 's/c/d/' src/a.py && python x.py", "files edited: src/a.py"},
		{"cat <<'EOF' > repro.py\nprint(1)\nEOF\npython repro.py", "files created: repro.py"},
		{"cat > notes.txt << EOF\nrm -rf src/\nEOF", "files created: notes.txt"},
		{"echo 'x = 1' >> src/a.py", "files created: src/a.py"},
		{"python - <<EOF\nopen('src/a.py', 'w').write(s)\nEOF", "files edited: src/a.py"},
		{"python -c \"from pathlib import Path; Path('src/b.py').write_text(s)\"", "files edited: src/b.py"},
		{"python -c \"\nimport sys\nopen('src/c.py', 'a').write('x')\n\" && echo ok", "files edited: src/c.py"},
		{"rm -f repro.py debug.py", "files deleted: repro.py, debug.py"},
		{"cat <<'EOF' > apply_fix.py\nwith open('src/a.py', 'w') as f:\n    f.write(s)\nEOF", "files edited: src/a.py; created: apply_fix.py"},
		{"cd /testbed && cat setup.py 2>/dev/null > /dev/null", "files read: setup.py"},
		{"grep -rn foo src/ | head -5", ""},
		{"ls -la && git status", ""},
		{"python -m pytest tests/test_a.py", ""},
	}
	for _, c := range cases {
		x := newExtraction(&SummaryRequest{}, nil)
		x.noteCall(&ToolCall{ID: "c", Function: FunctionCall{Name: "bash", Arguments: jsonArgs("command", c.cmd)}})
		x.noteResult(&Message{Role: RoleTool, ToolCallID: "c", Content: "<returncode>0</returncode>"})
		got := ""
		if !x.trail.empty() {
			got = x.trail.String()
		}
		if got != c.want {
			t.Errorf("%q: trail %q, want %q", c.cmd, got, c.want)
		}
	}
	// A failed write is no edit; a failed read still was a read; in a script of several
	// commands the exit code is the last one's, so the writes before it count.
	for _, c := range []struct{ cmd, want string }{
		{"sed -i 's/a/b/' src/a.py", ""},
		{"cat src/b.py", "files read: src/b.py"},
		{"sed -i 's/a/b/' src/a.py && python -m pytest", "files edited: src/a.py"},
	} {
		x := newExtraction(&SummaryRequest{}, nil)
		x.noteCall(&ToolCall{ID: "c", Function: FunctionCall{Name: "bash", Arguments: jsonArgs("command", c.cmd)}})
		x.noteResult(&Message{Role: RoleTool, ToolCallID: "c", Content: "<returncode>2</returncode>\nsed: can't read src/a.py"})
		got := ""
		if !x.trail.empty() {
			got = x.trail.String()
		}
		if got != c.want {
			t.Errorf("%q failing: trail %q, want %q", c.cmd, got, c.want)
		}
	}
}

// The huge results an agent can produce (a submitted diff of 800 KB) cost a bounded scan,
// and their file list is read.
func TestExtractiveHugeResult(t *testing.T) {
	diff := "diff --git a/requests/models.py b/requests/models.py\n+fix\n" + strings.Repeat("diff --git a/build/lib/x.py b/build/lib/x.py\n+"+strings.Repeat("y", 500)+"\n", 1600)
	msgs := []Message{
		user("Fix requests.get sending Content-Length on GET requests; the right behavior is not to add this header automatically."),
		asstCalls("Submitting.", tcall("c1", "bash", jsonArgs("command", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"))),
		result("c1", diff),
	}
	m, _ := summarize(t, SummaryRequest{Messages: msgs, MaxSummaryChars: 2000})
	mustContain(t, "execution_progress", m[AnchorExecutionProgress], "files edited: requests/models.py, build/lib/x.py")
}

// An offloaded result still tells how its command went when its preview shows it, and the
// anchor says where the full result is.
func TestExtractiveOffloadedResult(t *testing.T) {
	out := "<returncode>1</returncode>\n<output>\n" + strings.Repeat("tests/test_a.py ....F\n", 500) + "1 failed, 99 passed in 2.0s\n</output>"
	msgs := []Message{
		user("Fix the failing test."),
		asstCalls("Running the suite.", tcall("m9", "bash", jsonArgs("command", "python -m pytest tests -q"))),
		result("m9", Placeholder("m9", out, "mem://m9", 5)),
	}
	m, _ := summarize(t, SummaryRequest{Messages: msgs, MaxSummaryChars: 2000})
	mustContain(t, "execution_progress", m[AnchorExecutionProgress], "python -m pytest tests -q -> exit 1 (full result: m9)")
	mustContain(t, "tried_solution", m[AnchorTriedSolution], "python -m pytest tests -q -> exit 1 (full result: m9)")
}

// Issue 30 item 5: after offload the summarizer sees a test log only as its placeholder; the
// failure lines it keeps from the middle give the anchors the names of the latest failing
// tests (pytest -v, unittest, go test), not only an exit code.
func TestExtractiveNamesFailingTestsOfOffloadedLogs(t *testing.T) {
	noSummary := func(log string) string { // pytest -v without its summary: names only in the middle
		return "<returncode>1</returncode>\n" + log[:strings.Index(log, "=========================== short test summary")] + "teardown ok\nteardown ok\nteardown ok\n"
	}
	unittestLog := "<returncode>1</returncode>\n<output>\n" + strings.Repeat("Cloning test database for alias 'default'...\n", 12) +
		"ss.ssss............FF..\n" +
		"======================================================================\n" +
		"FAIL: test_aware_datetime_in_local_timezone (timezones.tests.SerializationTests)\n" +
		"----------------------------------------------------------------------\nTraceback (most recent call last):\n" +
		"  File \"/testbed/tests/timezones/tests.py\", line 745, in test_aware_datetime_in_local_timezone\n" +
		"    self.assertEqual(obj.dt.replace(tzinfo=UTC), dt)\nAssertionError: datetime(2011, 9, 1, 10, 20, 30) != datetime(2011, 9, 1, 13, 20, 30)\n\n" +
		"FAIL: test_aware_datetime_with_microsecond (timezones.tests.SerializationTests)\n" +
		"----------------------------------------------------------------------\nTraceback (most recent call last):\n" +
		"  File \"/testbed/tests/timezones/tests.py\", line 697, in test_aware_datetime_with_microsecond\n" +
		"    self.assertEqual(obj.dt.replace(tzinfo=UTC), dt)\nAssertionError: datetime(2011, 9, 1, 17, 20, 30, 405060) != datetime(2011, 9, 1, 13, 20, 30, 405060)\n\n" +
		"----------------------------------------------------------------------\nRan 83 tests in 0.370s\n\nFAILED (failures=2, skipped=8)\n" +
		strings.Repeat("Destroying test database for alias 'default'...\n", 60) + "</output>"
	goLog := strings.Repeat("=== RUN   TestParse\n--- PASS: TestParse (0.00s)\n", 150) + "=== RUN   TestEvict\n    cache_test.go:42: got 3, want 2\n" +
		"--- FAIL: TestEvict (0.01s)\n" + strings.Repeat("=== RUN   TestLoad\n--- PASS: TestLoad (0.00s)\n", 150) + "FAIL\nexit status 1\nFAIL\texample.com/cache\t0.02s\n"
	logs := []struct{ id, cmd, content string }{
		{"c1", "python -m pytest tests -v", noSummary(pytestVerboseLog(500, 211, 240))},
		{"c2", "go test ./cache/", goLog},
		{"c3", "/testbed/tests/runtests.py timezones", unittestLog},
		{"c4", "python -m pytest tests -v", noSummary(pytestVerboseLog(500, 262))},
	}
	msgs := make([]Message, 0, 1+2*len(logs))
	msgs = append(msgs, user("Fix the failing tests."))
	for _, l := range logs {
		ph := Placeholder(l.id, l.content, "mem://"+l.id, 10)
		if len(ph) >= len(l.content) {
			t.Fatalf("%s: the placeholder is not smaller than the log", l.id)
		}
		msgs = append(msgs, asstCalls("Running the tests.", tcall(l.id, "bash", jsonArgs("command", l.cmd))), result(l.id, ph))
	}
	m, _ := summarize(t, SummaryRequest{Messages: msgs, MaxSummaryChars: 4000})
	for _, typ := range []AnchorType{AnchorExecutionProgress, AnchorTriedSolution} {
		mustContain(t, string(typ), m[typ],
			"failing: tests/test_mod.py::test_case_211, tests/test_mod.py::test_case_240",
			"failing: TestEvict",
			"failing: timezones.tests.SerializationTests.test_aware_datetime_in_local_timezone, timezones.tests.SerializationTests.test_aware_datetime_with_microsecond",
			"failing: tests/test_mod.py::test_case_262")
	}
	// The latest run's failures are the last item of tried_solution.
	items := splitItems(m[AnchorTriedSolution]).items
	if last := items[len(items)-1]; !strings.Contains(last, "test_case_262") || strings.Contains(last, "test_case_211") {
		t.Errorf("tried_solution's last item is not the latest run: %q", last)
	}
}

// forward and backward run concurrently on a long span (read), so backward must not read
// what forward writes: run in either order, or at once, they give the same summary. The
// SWE-agent history names an edit by the file forward finds open, which backward's items
// need, so it fails if backward names its calls itself.
func TestExtractiveReadOrderFree(t *testing.T) {
	long := slices.Concat(sweAgentHistory()[1:], miniSWEHistory()[1:], openHandsHistory()[1:])
	for name, msgs := range map[string][]Message{
		"swe-agent": sweAgentHistory()[1:], "mini-swe-agent": miniSWEHistory()[1:], "openhands": openHandsHistory()[1:], "all three": long,
	} {
		req := SummaryRequest{Messages: msgs, MaxSummaryChars: 3000}
		forwardFirst := newExtraction(&req, nil)
		forwardFirst.forward()
		forwardFirst.backward()
		forwardFirst.name()
		want := forwardFirst.result()

		backwardFirst := newExtraction(&req, nil)
		backwardFirst.backward()
		backwardFirst.forward()
		backwardFirst.name()
		concurrent := newExtraction(&req, newExtractMemo())
		concurrent.read(true)
		for order, got := range map[string]SummaryResult{"backward first": backwardFirst.result(), "concurrently": concurrent.result()} {
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s: the summary differs from forward then backward:\n got %+v\nwant %+v", name, order, got, want)
			}
		}
	}
}

// The last action of next_step is the latest call that has a name: one that only runs a
// comment has none, and an earlier call is named instead, on a short span and on a long one
// (whose passes run at once).
func TestExtractiveLastActionSkipsNamelessCalls(t *testing.T) {
	turn := func(id, say, cmd, out string) []Message {
		return []Message{asstCalls(say, tcall(id, "bash", jsonArgs("command", cmd))), result(id, out)}
	}
	for _, n := range []int{1, 40} {
		msgs := []Message{user("Fix the failing test in pkg/foo.")}
		for i := range n {
			msgs = append(msgs, turn(fmt.Sprintf("c%d", i), "I will run the tests.", "pytest tests/test_foo.py",
				"FAILED tests/test_foo.py::test_x - AssertionError\n1 failed in 0.1s")...)
		}
		msgs = append(msgs, turn("think", "Hmm.", "# just thinking", "")...)
		m, _ := summarize(t, SummaryRequest{Messages: msgs, MaxSummaryChars: 3000})
		mustContain(t, fmt.Sprintf("next_step of %d messages", len(msgs)), m[AnchorNextStep], "(last action: pytest tests/test_foo.py)")
	}
}
