package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/internal/rawjson"
)

// cli is a request as Gemini CLI sends it through @google/genai (members in the SDK's order:
// contents, systemInstruction, tools, generationConfig): the environment context, a prompt,
// a model turn with a thought signature on its call, its response, parallel calls answered in
// one user content (ids as the CLI sets them), an image the user pasted, a thought part, and
// fields and parts this package does not know.
const cli = `{
  "contents": [
    {"role": "user", "parts": [{"text": "This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Friday.\nMy operating system is: linux\n"}]},
    {"role": "user", "parts": [{"text": "Fix the failing test in pkg/parse."}, {"text": "\n--- Content from referenced files ---\nContent from @pkg/parse/parse.go:\npackage parse\n"}]},
    {"role": "model", "parts": [
      {"text": "I'll run the tests first."},
      {"functionCall": {"name": "run_shell_command", "args": {"command": "go test ./pkg/parse", "description": "Run <the> tests & see"}, "id": "run_shell_command__run_shell_command_1754_0"}, "thoughtSignature": "CiQB0e2Kb1c2ZmYzNGJhLTk="}
    ]},
    {"role": "user", "parts": [
      {"functionResponse": {"id": "run_shell_command__run_shell_command_1754_0", "name": "run_shell_command", "response": {"output": "Command: go test ./pkg/parse\nStdout: --- FAIL: TestParse\n    parse_test.go:12: got 1, want 2\nExit Code: 1"}}}
    ]},
    {"role": "model", "parts": [
      {"text": "Let me look at both files.", "thought": true},
      {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse.go"}, "id": "read_file__read_file_1755_1"}, "thoughtSignature": "EjQKMgFyyNp8"},
      {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse_test.go"}, "id": "read_file__read_file_1755_2"}}
    ]},
    {"role": "user", "parts": [
      {"functionResponse": {"id": "read_file__read_file_1755_1", "name": "read_file", "response": {"output": "package parse\n\nfunc Parse() int { return 1 }\n"}}},
      {"functionResponse": {"id": "read_file__read_file_1755_2", "name": "read_file", "response": {"error": "File not found: /work/pkg/parse/parse_test.go"}}}
    ]},
    {"role": "model", "parts": [{"text": "The constant is wrong. What does the screenshot show?", "thoughtSignature": "Ahg3"}]},
    {"role": "user", "parts": [
      {"text": "Here:"},
      {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}},
      {"futurePart": {"x": 1}}
    ]}
  ],
  "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent. Use <tools> & be brief."}]},
  "tools": [{"functionDeclarations": [
    {"name": "run_shell_command", "description": "Runs a shell command.", "parametersJsonSchema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"name": "read_file", "description": "Reads a file.", "parametersJsonSchema": {"type": "object", "properties": {"absolute_path": {"type": "string"}}}}
  ]}],
  "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
  "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
  "generationConfig": {"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "HIGH"}},
  "labels": {"session": "abc"}
}`

func decode(t *testing.T, body string) *Request {
	t.Helper()
	r, err := DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameJSON compares two documents as values: the encoder drops whitespace.
func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

// describe is one line per message, for comparing decoded conversations.
func describe(msgs []compaction.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		d := string(m.Role)
		switch {
		case m.ToolCallID != "":
			d += " result " + m.ToolCallID + ": " + m.Content
			if m.ContentParts != nil {
				d += "parts " + string(m.ContentParts)
			}
		case len(m.ToolCalls) > 0:
			d += " " + m.Content + " calls"
			for _, tc := range m.ToolCalls {
				d += " " + tc.ID + " " + tc.Function.Name + tc.Function.Arguments
			}
		case m.ContentParts != nil:
			d += " parts " + string(m.ContentParts)
		default:
			d += " " + m.Content
		}
		out = append(out, d)
	}
	return out
}

func TestDecodeMapsEveryPart(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want []string
	}{
		{"Gemini CLI", cli, []string{
			"system You are an interactive CLI agent. Use <tools> & be brief.",
			"user This is the Gemini CLI. We are setting up the context for our chat.\nToday's date is Friday.\nMy operating system is: linux\n",
			"user Fix the failing test in pkg/parse.\n--- Content from referenced files ---\nContent from @pkg/parse/parse.go:\npackage parse\n",
			`assistant I'll run the tests first. calls run_shell_command__run_shell_command_1754_0 run_shell_command{"command": "go test ./pkg/parse", "description": "Run <the> tests & see"}`,
			"tool result run_shell_command__run_shell_command_1754_0: Command: go test ./pkg/parse\nStdout: --- FAIL: TestParse\n    parse_test.go:12: got 1, want 2\nExit Code: 1",
			`assistant  calls read_file__read_file_1755_1 read_file{"absolute_path": "/work/pkg/parse/parse.go"} read_file__read_file_1755_2 read_file{"absolute_path": "/work/pkg/parse/parse_test.go"}`,
			"tool result read_file__read_file_1755_1: package parse\n\nfunc Parse() int { return 1 }\n",
			"tool result read_file__read_file_1755_2: File not found: /work/pkg/parse/parse_test.go",
			"assistant The constant is wrong. What does the screenshot show?",
			`user parts [{"type":"text","text":"Here:"},{"type":"image","part":{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}}},{"type":"other","part":{"futurePart":{"x":1}}}]`,
		}},
		{"calls without ids paired by position, then by name", `{"contents": [
			{"role": "user", "parts": [{"text": "go"}]},
			{"role": "model", "parts": [{"functionCall": {"name": "a", "args": {"n": 1}}}, {"functionCall": {"name": "b"}}, {"functionCall": {"name": "a", "args": {"n": 2}}}]},
			{"role": "function", "parts": [{"functionResponse": {"name": "b", "response": {"result": "B"}}}, {"functionResponse": {"name": "a", "response": {"output": "A1"}}}, {"functionResponse": {"name": "a", "response": {"x": 1, "y": "z"}}}]}
		]}`, []string{
			"user go",
			`assistant  calls gemini-1-0 a{"n": 1} gemini-1-1 b{} gemini-1-2 a{"n": 2}`,
			"tool result gemini-1-1: B",
			"tool result gemini-1-0: A1",
			`tool result gemini-1-2: {"x": 1, "y": "z"}`,
		}},
		{"response ids the calls do not have (older CLI): by position", `{"contents": [
			{"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}, {"functionCall": {"name": "ls", "args": {"p": 1}}}]},
			{"role": "user", "parts": [{"functionResponse": {"id": "ls-1", "name": "ls", "response": {"output": "x"}}}, {"functionResponse": {"id": "ls-2", "name": "ls", "response": {"output": "y"}}}, {"text": "and then?"}]}
		]}`, []string{
			`assistant  calls gemini-0-0 ls{} gemini-0-1 ls{"p": 1}`,
			"tool result gemini-0-0: x",
			"tool result gemini-0-1: y",
			"user and then?",
		}},
		{"duplicate call ids made unique; code execution; a multimodal response", `{"system_instruction": "Be brief.", "contents": [
			{"parts": {"text": "hi"}},
			{"role": "model", "parts": [{"executable_code": {"language": "PYTHON", "code": "print(1)"}}, {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}}, {"function_call": {"name": "f", "id": "x"}}, {"functionCall": {"name": "f", "id": "x"}}]},
			{"role": "user", "parts": [{"function_response": {"id": "x", "name": "f", "response": {"output": "one"}, "parts": [{"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}]}}, {"functionResponse": {"id": "x", "name": "f", "response": {"output": "two"}}}]}
		]}`, []string{
			"system Be brief.",
			"user hi",
			"assistant \nprint(1)\n\n1\n calls x f{} gemini-1-3 f{}",
			`tool result x: parts [{"type":"text","text":"one"},{"type":"image","part":{"inlineData":{"mimeType":"image/jpeg","data":"AAAA"}}}]`,
			"tool result gemini-1-3: two",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(decode(t, tc.body).Messages)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decoded\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestImagesCountAsImages: a base64 image counts as an image, not as its bytes.
func TestImagesCountAsImages(t *testing.T) {
	data := strings.Repeat("QUJD", 250_000) // a 1 MB screenshot
	r := decode(t, `{"contents": [{"role": "user", "parts": [{"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": "`+data+`"}}]}]}`)
	if got := compaction.EstimateTokens(r.Messages); got > compaction.ImageTokens+100 {
		t.Errorf("estimate %d tokens for one image, want about %d", got, compaction.ImageTokens)
	}
}

// TestEncodeUnchangedIsTheRequest: a view that is the whole conversation encodes to the
// request itself: every content verbatim (whitespace inside them too), every other member in
// its place.
func TestEncodeUnchangedIsTheRequest(t *testing.T) {
	for name, body := range map[string]string{
		"Gemini CLI":  cli,
		"countTokens": `{"contents": [{"role": "user", "parts": [{"text": "hi"}]}, {"role": "model", "parts": [{"text": "hello"}]}]}`,
		"countTokens wrapped": `{"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
			"systemInstruction": {"parts": [{"text": "sys"}]}, "tools": [{"googleSearch": {}}]}}`,
		"consecutive user contents and a null system": `{"systemInstruction": null, "contents": [{"role": "user", "parts": [{"text": "a"}]}, {"role": "user", "parts": [{"text": "b"}]},
			{"role": "model", "parts": [{"text": "thinking", "thought": true, "thoughtSignature": "s"}]}, {"role": "model", "parts": []}, {"role": "user", "parts": [{"text": "c"}]}]}`,
		"snake_case": `{"system_instruction": {"parts": {"text": "sys"}}, "contents": [{"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "AA=="}}]}], "generation_config": {"temperature": 0}}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := decode(t, body)
			out, err := r.Encode(r.Messages)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, out, []byte(body)) {
				t.Errorf("encoded\n%s\nwant the request", out)
			}
			if want := compactJSON(t, body); string(out) != want {
				t.Errorf("encoded\n%s\nwant the request's bytes\n%s", out, want)
			}
		})
	}
}

// compactJSON is body with the whitespace between the members Encode writes removed: the
// top-level members and the contents array. Each content and member value keeps its bytes.
func compactJSON(t *testing.T, body string) string {
	t.Helper()
	members, err := decodeObject([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range members {
		if m.key == "generateContentRequest" {
			members[i].value = json.RawMessage(compactJSON(t, string(m.value)))
		}
		if m.key == "contents" {
			var items []json.RawMessage
			if err := json.Unmarshal(m.value, &items); err != nil {
				t.Fatal(err)
			}
			members[i].value = rawjson.JoinArray(items)
		}
	}
	return string(object(members))
}

// TestEncodeAfterTheCompactionAPI: the view comes back from the compaction API through a JSON
// encoder (compacted, HTML-escaped parts); kept messages still match their sources.
func TestEncodeAfterTheCompactionAPI(t *testing.T) {
	r := decode(t, cli)
	wire, err := json.Marshal(r.Messages)
	if err != nil {
		t.Fatal(err)
	}
	var back []compaction.Message
	if err := json.Unmarshal(wire, &back); err != nil {
		t.Fatal(err)
	}
	out, err := r.Encode(back)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != compactJSON(t, cli) {
		t.Errorf("encoded\n%s\nwant the request", out)
	}
}

type geminiContent struct {
	Role  string            `json:"role"`
	Parts []json.RawMessage `json:"parts"`
}

func contentsOf(t *testing.T, body []byte) []geminiContent {
	t.Helper()
	var req struct {
		Contents []geminiContent `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return req.Contents
}

func TestEncodeACompactedView(t *testing.T) {
	r := decode(t, cli)
	m := r.Messages
	const summary = "[summary] The task: fix TestParse; the constant in parse.go is wrong."
	for _, tc := range []struct {
		name  string
		view  []compaction.Message
		want  []string // role: parts, each part as its JSON
		check func(t *testing.T, out []byte)
	}{
		{
			name: "summary and tail",
			view: []compaction.Message{m[0], {Role: compaction.RoleUser, Content: summary}, m[5], m[6], m[7], m[8], m[9]},
			want: []string{
				`user: {"text":"` + summary + `"}`,
				`model: {"text": "Let me look at both files.", "thought": true} | {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse.go"}, "id": "read_file__read_file_1755_1"}, "thoughtSignature": "EjQKMgFyyNp8"} | {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse_test.go"}, "id": "read_file__read_file_1755_2"}}`,
				`user: {"functionResponse": {"id": "read_file__read_file_1755_1", "name": "read_file", "response": {"output": "package parse\n\nfunc Parse() int { return 1 }\n"}}} | {"functionResponse": {"id": "read_file__read_file_1755_2", "name": "read_file", "response": {"error": "File not found: /work/pkg/parse/parse_test.go"}}}`,
				`model: {"text": "The constant is wrong. What does the screenshot show?", "thoughtSignature": "Ahg3"}`,
				`user: {"text": "Here:"} | {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}} | {"futurePart": {"x": 1}}`,
			},
		},
		{
			name: "a pinned prompt, the summary, offloaded results out of order",
			view: []compaction.Message{m[0], m[2], {Role: compaction.RoleUser, Content: summary}, m[5],
				{Role: compaction.RoleTool, ToolCallID: "read_file__read_file_1755_2", Content: "[offloaded: not found]"},
				{Role: compaction.RoleTool, ToolCallID: "read_file__read_file_1755_1", Content: "[offloaded: 3 lines]"},
				m[8], m[9]},
			want: []string{
				`user: {"text": "Fix the failing test in pkg/parse."} | {"text": "\n--- Content from referenced files ---\nContent from @pkg/parse/parse.go:\npackage parse\n"} | {"text":"` + summary + `"}`,
				`model: {"text": "Let me look at both files.", "thought": true} | {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse.go"}, "id": "read_file__read_file_1755_1"}, "thoughtSignature": "EjQKMgFyyNp8"} | {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse_test.go"}, "id": "read_file__read_file_1755_2"}}`,
				`user: {"functionResponse":{"id":"read_file__read_file_1755_1","name":"read_file","response":{"output":"[offloaded: 3 lines]"}}} | {"functionResponse":{"id":"read_file__read_file_1755_2","name":"read_file","response":{"error":"[offloaded: not found]"}}}`,
				`model: {"text": "The constant is wrong. What does the screenshot show?", "thoughtSignature": "Ahg3"}`,
				`user: {"text": "Here:"} | {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}} | {"futurePart": {"x": 1}}`,
			},
		},
		{
			name: "a call the engine dropped: the kept one keeps its part, the first gets a signature",
			view: []compaction.Message{m[0], {Role: compaction.RoleUser, Content: summary},
				{Role: compaction.RoleAssistant, ToolCalls: m[5].ToolCalls[1:]},
				m[7], m[8], m[9]},
			want: []string{
				`user: {"text":"` + summary + `"}`,
				`model: {"functionCall": {"name": "read_file", "args": {"absolute_path": "/work/pkg/parse/parse_test.go"}, "id": "read_file__read_file_1755_2"},"thoughtSignature":"skip_thought_signature_validator"}`,
				`user: {"functionResponse": {"id": "read_file__read_file_1755_2", "name": "read_file", "response": {"error": "File not found: /work/pkg/parse/parse_test.go"}}}`,
				`model: {"text": "The constant is wrong. What does the screenshot show?", "thoughtSignature": "Ahg3"}`,
				`user: {"text": "Here:"} | {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}} | {"futurePart": {"x": 1}}`,
			},
		},
		{
			name: "a late result shown as text and an interrupted call closed",
			view: []compaction.Message{m[0], {Role: compaction.RoleUser, Content: summary}, m[3],
				{Role: compaction.RoleTool, ToolCallID: "run_shell_command__run_shell_command_1754_0", Content: compaction.InterruptedResult},
				{Role: compaction.RoleUser, Content: "[late result of tool call x]\nok"}},
			want: []string{
				`user: {"text":"` + summary + `"}`,
				`model: {"text": "I'll run the tests first."} | {"functionCall": {"name": "run_shell_command", "args": {"command": "go test ./pkg/parse", "description": "Run <the> tests & see"}, "id": "run_shell_command__run_shell_command_1754_0"}, "thoughtSignature": "CiQB0e2Kb1c2ZmYzNGJhLTk="}`,
				`user: {"functionResponse":{"id":"run_shell_command__run_shell_command_1754_0","name":"run_shell_command","response":{"output":"` + compaction.InterruptedResult + `"}}} | {"text":"[late result of tool call x]\nok"}`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := r.Encode(tc.view)
			if err != nil {
				t.Fatal(err)
			}
			contents := contentsOf(t, out)
			got := make([]string, 0, len(contents))
			for _, c := range contents {
				ps := make([]string, len(c.Parts))
				for i, p := range c.Parts {
					ps[i] = string(p)
				}
				got = append(got, c.Role+": "+strings.Join(ps, " | "))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("contents\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, field := range []string{
				`"systemInstruction":{"role": "user", "parts": [{"text": "You are an interactive CLI agent. Use <tools> & be brief."}]}`,
				`"generationConfig":{"temperature": 1, "topP": 0.95, "thinkingConfig": {"includeThoughts": true, "thinkingLevel": "HIGH"}}`,
				`"toolConfig":{"functionCallingConfig": {"mode": "AUTO"}}`,
				`"labels":{"session": "abc"}`,
			} {
				if !strings.Contains(string(out), field) {
					t.Errorf("%s is not passed through byte for byte:\n%s", field, out)
				}
			}
			if err := checkValid(out); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		})
	}
}

// TestPlaceholderWithoutSignatures: in a request that carries no thought signature, a rebuilt
// call gets none, and a placeholder for a call without an id answers it by name only.
func TestPlaceholderWithoutSignatures(t *testing.T) {
	r := decode(t, `{"contents": [
		{"role": "user", "parts": [{"text": "go"}]},
		{"role": "model", "parts": [{"functionCall": {"name": "a", "args": {}}}, {"functionCall": {"name": "b", "args": {}}}]},
		{"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {"output": "A"}, "willContinue": false}}, {"functionResponse": {"name": "b", "response": {"output": "B"}}}]}
	]}`)
	view := []compaction.Message{r.Messages[0],
		{Role: compaction.RoleAssistant, ToolCalls: r.Messages[1].ToolCalls[:1]},
		{Role: compaction.RoleTool, ToolCallID: "gemini-1-0", Content: "[offloaded]"}}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role": "user", "parts": [{"text": "go"}]},{"role":"model","parts":[{"functionCall": {"name": "a", "args": {}}}]},{"role":"user","parts":[{"functionResponse":{"willContinue":false,"name":"a","response":{"output":"[offloaded]"}}}]}]}`
	if string(out) != want {
		t.Errorf("encoded\n%s\nwant\n%s", out, want)
	}
}

// TestCompactedByTheEngine runs the real engine over a long Gemini CLI tool loop and checks
// that every view it makes encodes to a request the API accepts: roles alternate, the
// conversation starts with the user, every functionResponse answers a call of the model
// content right before it, all of them, in order; and that the contents it keeps are the
// request's own bytes.
func TestCompactedByTheEngine(t *testing.T) {
	const turns = 40
	contents := make([]string, 0, 1+2*turns)
	contents = append(contents, `{"role": "user", "parts": [{"text": "Refactor the parser; keep the API stable."}]}`)
	for i := range turns {
		contents = append(contents,
			fmt.Sprintf(`{"role": "model", "parts": [{"text": "Step %d.", "thought": true, "thoughtSignature": "t%d"}, {"functionCall": {"name": "read_file", "args": {"absolute_path": "file%d.go"}, "id": "read_file__%d"}, "thoughtSignature": "sig%d"}, {"functionCall": {"name": "glob", "args": {"pattern": "*%d"}, "id": "glob__%d"}}]}`, i, i, i, i, i, i, i),
			fmt.Sprintf(`{"role": "user", "parts": [{"functionResponse": {"id": "read_file__%d", "name": "read_file", "response": {"output": %q}}}, {"functionResponse": {"id": "glob__%d", "name": "glob", "response": {"output": "file%d.go"}}}]}`, i, strings.Repeat(fmt.Sprintf("line %d of file%d.go\n", i, i), 25), i, i))
	}
	body := `{"contents": [` + strings.Join(contents, ",") + `], "systemInstruction": {"role": "user", "parts": [{"text": "You are a coding agent."}]}, "generationConfig": {"thinkingConfig": {"includeThoughts": true}}}`
	r := decode(t, body)
	c, err := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: 6000, MinTailMessages: 6},
		compaction.WithStore(mem.New()), compaction.WithSessionID("gemini"))
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[compaction.Tier]bool{}
	for n := 2; n < len(contents); n += 2 { // up to a user content each time
		sub := decode(t, `{"contents": [`+strings.Join(contents[:n+1], ",")+`], "systemInstruction": {"role": "user", "parts": [{"text": "You are a coding agent."}]}}`)
		view, rec, err := c.CompactWithRecord(context.Background(), sub.Messages)
		if err != nil {
			t.Fatal(err)
		}
		tiers[rec.Tier] = true
		out, err := sub.Encode(view)
		if err != nil {
			t.Fatalf("turn %d: %v", n, err)
		}
		if err := checkValid(out); err != nil {
			t.Fatalf("turn %d (%s): %v\n%s", n, rec.Tier, err, out)
		}
		// The latest contents are kept whole.
		last := contents[n]
		if !strings.HasSuffix(string(out), ","+last+`],"systemInstruction":{"role": "user", "parts": [{"text": "You are a coding agent."}]}}`) {
			t.Fatalf("turn %d (%s): the last content is not the request's:\n%s", n, rec.Tier, out)
		}
	}
	t.Logf("tiers over the loop: %v", tiers)
	if !tiers[compaction.TierWarn] || !tiers[compaction.TierFull] && !tiers[compaction.TierSoft] {
		t.Errorf("the loop never compacted (tiers %v): the test checks nothing", tiers)
	}
	if out, err := r.Encode(r.Messages); err != nil || string(out) != compactJSON(t, body) {
		t.Errorf("the whole loop does not round-trip: %v", err)
	}
}

// checkValid checks what the API requires of contents: user first, roles alternating, every
// model content's calls answered by the user content right after it, in call order.
func checkValid(body []byte) error {
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				FunctionCall *struct {
					Name string `json:"name"`
					ID   string `json:"id"`
				} `json:"functionCall"`
				FunctionResponse *struct {
					Name string `json:"name"`
					ID   string `json:"id"`
				} `json:"functionResponse"`
				ThoughtSignature string `json:"thoughtSignature"`
			} `json:"parts"`
		} `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	if len(req.Contents) == 0 || req.Contents[0].Role != "user" {
		return errors.New("the contents do not start with a user content")
	}
	var calls []string
	for i, c := range req.Contents {
		if i > 0 && c.Role == req.Contents[i-1].Role {
			return fmt.Errorf("contents %d and %d are both %s", i-1, i, c.Role)
		}
		if len(c.Parts) == 0 {
			return fmt.Errorf("content %d has no parts", i)
		}
		if c.Role == "model" {
			calls = calls[:0]
			for _, p := range c.Parts {
				if p.FunctionCall != nil {
					if len(calls) == 0 && p.ThoughtSignature == "" && strings.Contains(string(body), "thoughtSignature") {
						return fmt.Errorf("content %d: the first call has no thought signature", i)
					}
					calls = append(calls, p.FunctionCall.Name+"/"+p.FunctionCall.ID)
				}
			}
			continue
		}
		var answers []string
		for _, p := range c.Parts {
			if p.FunctionResponse != nil {
				answers = append(answers, p.FunctionResponse.Name+"/"+p.FunctionResponse.ID)
			}
		}
		if len(answers) > 0 || len(calls) > 0 {
			if !reflect.DeepEqual(answers, calls) {
				return fmt.Errorf("content %d answers %v to the calls %v", i, answers, calls)
			}
		}
		calls = calls[:0]
	}
	return nil
}

func TestDecodeRefusesBadRequests(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":                  `{"contents": [`,
		"not an object":             `[1, 2]`,
		"null":                      `null`,
		"two objects":               `{"contents": []} {}`,
		"no contents":               `{"model": "m"}`,
		"contents null":             `{"contents": null}`,
		"contents not an array":     `{"contents": {"role": "user"}}`,
		"content not an object":     `{"contents": ["hi"]}`,
		"unknown role":              `{"contents": [{"role": "assistant", "parts": [{"text": "hi"}]}]}`,
		"role a number":             `{"contents": [{"role": 1, "parts": []}]}`,
		"parts a string":            `{"contents": [{"role": "user", "parts": "hi"}]}`,
		"part not an object":        `{"contents": [{"role": "user", "parts": ["hi"]}]}`,
		"text a number":             `{"contents": [{"role": "user", "parts": [{"text": 1}]}]}`,
		"call without name":         `{"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]}`,
		"call args a string":        `{"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": "{}"}}]}]}`,
		"call in a user content":    `{"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]}`,
		"response from the model":   `{"contents": [{"role": "model", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}`,
		"response with no call":     `{"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}`,
		"more responses than calls": `{"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f"}}]}, {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}, {"functionResponse": {"name": "f", "response": {}}}]}]}`,
		"response not an object":    `{"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f"}}]}, {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "ok"}}]}]}`,
		"system a number":           `{"systemInstruction": 1, "contents": []}`,
		"system parts not an array": `{"systemInstruction": {"parts": 1}, "contents": []}`,
		"two system keys":           `{"systemInstruction": "a", "system_instruction": "b", "contents": []}`,
		"wrapped not an object":     `{"generateContentRequest": []}`,
		"wrapped without contents":  `{"generateContentRequest": {"model": "m"}}`,
		"invalid UTF-8":             "{\"contents\": [{\"role\": \"user\", \"parts\": [{\"text\": \"\xff\"}]}]}",
	} {
		if _, err := DecodeRequest([]byte(body)); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	r := decode(t, `{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}`)
	for name, view := range map[string][]compaction.Message{
		"an unknown role":             {{Role: "developer", Content: "x"}},
		"a result for no call":        {{Role: compaction.RoleTool, ToolCallID: "nope", Content: "x"}},
		"arguments that are not JSON": {{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "c", Function: compaction.FunctionCall{Name: "f", Arguments: "{"}}}}},
		"parts with no Gemini part":   {{Role: compaction.RoleUser, ContentParts: json.RawMessage(`[{"type":"image_url","image_url":{"url":"x"}}]`)}},
	} {
		if _, err := r.Encode(view); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Encode with %s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

// TestEncodeANewCall: a call the request does not have (only a view can make one) is written
// with its id, and its result answers it by that id.
func TestEncodeANewCall(t *testing.T) {
	r := decode(t, `{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}`)
	out, err := r.Encode([]compaction.Message{r.Messages[0],
		{Role: compaction.RoleAssistant, Content: "ok", ToolCalls: []compaction.ToolCall{{ID: "c1", Function: compaction.FunctionCall{Name: "f", Arguments: `{"a":1}`}}}},
		{Role: compaction.RoleTool, ToolCallID: "c1", Content: "done"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role": "user", "parts": [{"text": "hi"}]},{"role":"model","parts":[{"text":"ok"},{"functionCall":{"name":"f","args":{"a":1},"id":"c1"}}]},{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"f","response":{"output":"done"}}}]}]}`
	if string(out) != want {
		t.Errorf("encoded\n%s\nwant\n%s", out, want)
	}
}

// BenchmarkDecodeEncode: a 200-turn tool loop (about 400 KB) decoded and encoded back, the
// work a proxy adds to each request besides the compaction itself.
func BenchmarkDecodeEncode(b *testing.B) {
	const turns = 200
	contents := make([]string, 0, 1+2*turns)
	contents = append(contents, `{"role": "user", "parts": [{"text": "Refactor the parser."}]}`)
	for i := range turns {
		contents = append(contents,
			fmt.Sprintf(`{"role": "model", "parts": [{"text": "Step %d."}, {"functionCall": {"name": "read_file", "args": {"absolute_path": "f%d.go"}, "id": "read_file__%d"}, "thoughtSignature": "sig"}]}`, i, i, i),
			fmt.Sprintf(`{"role": "user", "parts": [{"functionResponse": {"id": "read_file__%d", "name": "read_file", "response": {"output": %q}}}]}`, i, strings.Repeat("some output line\n", 100)))
	}
	body := []byte(`{"contents": [` + strings.Join(contents, ",") + `], "systemInstruction": {"parts": [{"text": "You are a coding agent."}]}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := DecodeRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Encode(r.Messages); err != nil {
			b.Fatal(err)
		}
	}
}
