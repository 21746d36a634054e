package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
)

// codex is a request as Codex (0.17x) sends it: instructions, a leading developer message,
// AGENTS.md and environment context as user messages, an image, reasoning with
// encrypted_content (store: false), parallel function calls, a developer message
// mid-conversation, a custom (freeform apply_patch) tool, and fields this package does not
// know.
const codex = `{
  "model": "gpt-5.1-codex",
  "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI.\n\n- Prefer <rg> & be brief.",
  "input": [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "# AGENTS.md instructions for /home/dev/parser\n\n<INSTRUCTIONS>\nRun go test before committing.\n</INSTRUCTIONS>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/home/dev/parser</cwd>\n  <shell>bash</shell>\n</environment_context>"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "The parser test fails on CI; fix it."}, {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"}]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Running the tests**"}], "content": null, "encrypted_content": "gAAAAABpX1-encrypted-1"},
    {"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"go test ./...\",\"workdir\":\"/home/dev/parser\"}", "call_id": "call_A1"},
    {"type": "function_call_output", "call_id": "call_A1", "output": "Exit code: 1\nWall time: 2.1 seconds\nOutput:\n--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 1, want 2\nFAIL"},
    {"type": "reasoning", "summary": [], "content": null, "encrypted_content": "gAAAAABpX1-encrypted-2"},
    {"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"cat parse.go\"}", "call_id": "call_B1"},
    {"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"cat parse_test.go\"}", "call_id": "call_B2"},
    {"type": "function_call_output", "call_id": "call_B1", "output": "Exit code: 0\nOutput:\npackage parse\n\nfunc Parse() int { return 1 }"},
    {"type": "function_call_output", "call_id": "call_B2", "output": "Exit code: 0\nOutput:\npackage parse\n\nfunc TestParse(t *testing.T) { if Parse() != 2 { t.Fatal() } }"},
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<collaboration_mode>Approval policy is now never.</collaboration_mode>"}]},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Patching**"}], "content": null, "encrypted_content": "gAAAAABpX1-encrypted-3"},
    {"type": "custom_tool_call", "status": "completed", "call_id": "call_C1", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: parse.go\n@@\n-func Parse() int { return 1 }\n+func Parse() int { return 2 }\n*** End Patch\n"},
    {"type": "custom_tool_call_output", "call_id": "call_C1", "output": "{\"output\":\"Success. Updated the following files:\\nM parse.go\\n\",\"metadata\":{\"exit_code\":0}}"},
    {"type": "reasoning", "summary": [], "content": null, "encrypted_content": "gAAAAABpX1-encrypted-4"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed: Parse returned the wrong constant."}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks. Now run the linter."}]}
  ],
  "tools": [
    {"type": "function", "name": "shell_command", "description": "Runs a shell command", "strict": false, "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch", "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}}
  ],
  "tool_choice": "auto",
  "parallel_tool_calls": true,
  "reasoning": {"effort": "medium", "summary": "auto"},
  "store": false,
  "stream": true,
  "include": ["reasoning.encrypted_content"],
  "prompt_cache_key": "019a3c2e-7f4b-7d21-9c1e-5b2f3a4d6e8f",
  "text": {"verbosity": "low"},
  "client_metadata": {"originator": "codex_cli_rs"}
}`

// agentsSDK is a request as the OpenAI Agents SDK sends it after a tool round: role-only
// (EasyInputMessage) user messages, and the model's output items as it returned them, ids,
// statuses, annotations and all.
const agentsSDK = `{"model":"gpt-5-mini","instructions":"You are a weather agent.","input":[
{"content":"What's the weather in Paris and Tokyo?","role":"user"},
{"id":"rs_01","summary":[],"type":"reasoning","encrypted_content":"gAAAAAB-sdk-1"},
{"arguments":"{\"city\":\"Paris\"}","call_id":"call_P","name":"get_weather","type":"function_call","id":"fc_01","status":"completed"},
{"arguments":"{\"city\":\"Tokyo\"}","call_id":"call_T","name":"get_weather","type":"function_call","id":"fc_02","status":"completed"},
{"call_id":"call_P","output":"Paris: 18C, cloudy","type":"function_call_output"},
{"call_id":"call_T","output":[{"type":"input_text","text":"Tokyo: 24C, sunny"}],"type":"function_call_output"},
{"id":"msg_01","content":[{"annotations":[],"text":"Paris is 18C and cloudy; Tokyo 24C and sunny.","type":"output_text","logprobs":[]}],"role":"assistant","status":"completed","type":"message","phase":"final_answer"},
{"content":"And Berlin?","role":"user"}
],"tools":[{"name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"required":["city"],"type":"object","additionalProperties":false},"strict":true,"type":"function","description":"Get the weather"}],
"include":["reasoning.encrypted_content"],"store":false,"stream":false,"reasoning":{"effort":"low"},"truncation":"disabled","top_p":null,"metadata":{}}`

// aiSDK is a request as the Vercel AI SDK (@ai-sdk/openai) sends it on a reasoning model with
// "store" left to its default: the reasoning, and the text a reasoning item preceded, of the
// model's earlier outputs as item references; function calls without their ids.
const aiSDK = `{"model":"gpt-5.5","input":[
{"role":"developer","content":"You check test logs."},
{"role":"user","content":[{"type":"input_text","text":"Check the logs."}]},
{"type":"item_reference","id":"rs_01"},
{"type":"function_call","call_id":"call_1","name":"read_log","arguments":"{\"path\":\"a.log\"}"},
{"type":"function_call_output","call_id":"call_1","output":"a: ok"},
{"type":"item_reference","id":"rs_02"},
{"type":"item_reference","id":"msg_02"},
{"type":"function_call","call_id":"call_2","name":"read_log","arguments":"{\"path\":\"b.log\"}"},
{"type":"function_call_output","call_id":"call_2","output":"b: ok"},
{"type":"item_reference","id":"rs_03"},
{"type":"item_reference","id":"msg_03"},
{"role":"user","content":[{"type":"input_text","text":"Now c."}]}
],"tools":[{"type":"function","name":"read_log","parameters":{"type":"object","properties":{"path":{"type":"string"}}},"strict":false}],"tool_choice":"auto"}`

func decode(t *testing.T, body string) *Request {
	t.Helper()
	r, err := DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameJSON compares two documents as values: the encoder may drop whitespace and sort keys.
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

// inputItems is a body's input array, each item's bytes as they are in the body.
func inputItems(t testing.TB, body []byte) []json.RawMessage {
	t.Helper()
	var req struct {
		Input []json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("input is not an array of items: %v\n%s", err, body)
	}
	return req.Input
}

// describe is one line per message, for comparing decodes.
func describe(msgs []compaction.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		d := string(m.Role)
		if m.Pinned {
			d += " pinned"
		}
		switch {
		case m.ToolCallID != "":
			d += " result " + m.ToolCallID + ": " + m.Content
			if m.ContentParts != nil {
				d += "parts"
			}
		case len(m.ToolCalls) > 0:
			d += " " + m.Content + " calls"
			for _, tc := range m.ToolCalls {
				d += " " + tc.ID + " " + tc.Function.Name + tc.Function.Arguments
			}
		case m.ContentParts != nil:
			d += " parts"
		default:
			d += " " + m.Content
		}
		out = append(out, d)
	}
	return out
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"codex", codex, []string{
			"system You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI.\n\n- Prefer <rg> & be brief.",
			"system <permissions instructions>\nFilesystem sandboxing: workspace-write.\n</permissions instructions>",
			"user # AGENTS.md instructions for /home/dev/parser\n\n<INSTRUCTIONS>\nRun go test before committing.\n</INSTRUCTIONS>",
			"user <environment_context>\n  <cwd>/home/dev/parser</cwd>\n  <shell>bash</shell>\n</environment_context>",
			"user parts",
			`assistant  calls call_A1 shell_command{"command":"go test ./...","workdir":"/home/dev/parser"}`,
			"tool result call_A1: Exit code: 1\nWall time: 2.1 seconds\nOutput:\n--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 1, want 2\nFAIL",
			`assistant  calls call_B1 shell_command{"command":"cat parse.go"} call_B2 shell_command{"command":"cat parse_test.go"}`,
			"tool result call_B1: Exit code: 0\nOutput:\npackage parse\n\nfunc Parse() int { return 1 }",
			"tool result call_B2: Exit code: 0\nOutput:\npackage parse\n\nfunc TestParse(t *testing.T) { if Parse() != 2 { t.Fatal() } }",
			"user pinned <collaboration_mode>Approval policy is now never.</collaboration_mode>",
			"assistant  calls call_C1 apply_patch*** Begin Patch\n*** Update File: parse.go\n@@\n-func Parse() int { return 1 }\n+func Parse() int { return 2 }\n*** End Patch\n",
			`tool result call_C1: {"output":"Success. Updated the following files:\nM parse.go\n","metadata":{"exit_code":0}}`,
			"assistant Fixed: Parse returned the wrong constant.",
			"user Thanks. Now run the linter.",
		}},
		{"agents SDK", agentsSDK, []string{
			"system You are a weather agent.",
			"user What's the weather in Paris and Tokyo?",
			`assistant  calls call_P get_weather{"city":"Paris"} call_T get_weather{"city":"Tokyo"}`,
			"tool result call_P: Paris: 18C, cloudy",
			"tool result call_T: Tokyo: 24C, sunny",
			"assistant Paris is 18C and cloudy; Tokyo 24C and sunny.",
			"user And Berlin?",
		}},
		{"ai SDK", aiSDK, []string{
			"system You check test logs.",
			"user Check the logs.",
			`assistant  calls call_1 read_log{"path":"a.log"}`,
			"tool result call_1: a: ok",
			`assistant  calls call_2 read_log{"path":"b.log"}`,
			"tool result call_2: b: ok",
			"assistant ",
			"user Now c.",
		}},
		{"hosted tools by reference", `{"input": [
			{"role": "user", "content": "Find it."},
			{"type": "item_reference", "id": "rs_1"},
			{"type": "item_reference", "id": "ws_1"},
			{"type": "item_reference", "id": "fs_1"},
			{"type": "item_reference", "id": "ci_1"},
			{"type": "item_reference", "id": "ig_1"},
			{"type": "item_reference", "id": "msg_1"},
			{"role": "user", "content": "More."}
		]}`, []string{
			"user Find it.",
			"assistant ",
			"user More.",
		}},
		{"a message reference before the task", `{"input": [
			{"type": "item_reference", "id": "msg_00"},
			{"role": "user", "content": "go"},
			{"type": "item_reference", "id": "msg_01"},
			{"role": "user", "content": "again"}
		]}`, []string{
			`system {"type": "item_reference", "id": "msg_00"}`,
			"user go",
			"assistant ",
			"user again",
		}},
		{"string input", `{"model": "gpt-5", "input": "Write a haiku."}`, []string{"user Write a haiku."}},
		{"hosted tools and other calls", `{"input": [
			{"role": "user", "content": "go"},
			{"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "go 1.25"}},
			{"type": "local_shell_call", "id": "lsh_1", "call_id": "call_L", "status": "completed", "action": {"type": "exec", "command": ["ls"]}},
			{"type": "shell_call", "call_id": "call_S", "action": {"commands": ["pwd"]}},
			{"type": "apply_patch_call", "call_id": "call_P", "status": "completed", "operation": {"type": "delete_file", "path": "x.go"}},
			{"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "gh", "name": "create_issue", "arguments": "{}"},
			{"type": "function_call_output", "call_id": "call_L", "output": "a.go"},
			{"type": "shell_call_output", "call_id": "call_S", "output": [{"stdout": "/w", "stderr": "warn", "outcome": {"type": "exit", "exit_code": 0}}]},
			{"type": "apply_patch_call_output", "call_id": "call_P", "status": "completed", "output": "deleted"},
			{"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": false, "reason": "not now"},
			{"type": "computer_call", "call_id": "call_K", "action": {"type": "screenshot"}, "pending_safety_checks": [], "status": "completed"},
			{"type": "computer_call_output", "call_id": "call_K", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}}
		]}`, []string{
			"user go",
			`assistant  calls call_L local_shell{"type": "exec", "command": ["ls"]} call_S shell{"commands": ["pwd"]} call_P apply_patch{"type": "delete_file", "path": "x.go"} mcpr_1 create_issue{}`,
			"tool result call_L: a.go",
			"tool result call_S: /w\nwarn",
			"tool result call_P: deleted",
			"tool result mcpr_1: denied: not now",
			`assistant  calls call_K computer{"type": "screenshot"}`,
			"tool result call_K: parts",
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

// TestImagesCountAsImages: an input_image (and a computer screenshot) counts as an image for
// the estimate, not as the bytes of its data URL.
func TestImagesCountAsImages(t *testing.T) {
	big := strings.Repeat("A", 400_000)
	r := decode(t, `{"input": [
		{"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:image/png;base64,`+big+`"}]},
		{"type": "computer_call", "call_id": "c", "action": {"type": "screenshot"}},
		{"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,`+big+`"}}]}`)
	if got := compaction.EstimateTokens(r.Messages); got > 2*compaction.ImageTokens+200 {
		t.Errorf("estimate %d tokens: the images count as their bytes", got)
	}
}

// TestOffloadedImagesEncode: a view whose input_image the engine offloaded (a text part in
// its place) encodes the message with that input_text part; a computer_call_output, which has
// no text form, is written as the request had it.
func TestOffloadedImagesEncode(t *testing.T) {
	big := strings.Repeat("A", 400_000)
	body := `{"input": [
		{"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:image/png;base64,` + big + `"}]},
		{"type": "computer_call", "call_id": "c", "action": {"type": "screenshot"}},
		{"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,` + big + `"}}]}`
	r := decode(t, body)
	view := slices.Clone(r.Messages)
	placeholder := json.RawMessage(`[{"type":"input_text","text":"[Offloaded image]"}]`)
	for i := range view {
		if view[i].ContentParts != nil && view[i].Role != compaction.RoleAssistant {
			view[i] = view[i].Clone()
			view[i].ContentParts = placeholder
		}
	}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	items, want := inputItems(t, out), inputItems(t, []byte(body))
	if len(items) != 3 {
		t.Fatalf("%d items, want 3:\n%s", len(items), out)
	}
	if !bytes.Contains(items[0], []byte(`"[Offloaded image]"`)) || bytes.Contains(items[0], []byte(big)) {
		t.Errorf("the user message kept its image: %.200s", items[0])
	}
	if !bytes.Equal(items[2], want[2]) {
		t.Errorf("the computer_call_output changed: %.200s", items[2])
	}
}

// bodies are the realistic requests every round-trip test runs over.
var bodies = map[string]string{"codex": codex, "agents SDK": agentsSDK, "opaque": opaque}

// TestEncodeUnchangedIsTheRequest: a view that is the whole conversation encodes to the
// request itself: every field, and every input item byte for byte.
func TestEncodeUnchangedIsTheRequest(t *testing.T) {
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			r := decode(t, body)
			out, err := r.Encode(r.Messages)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, out, []byte(body)) {
				t.Errorf("encoded\n%s\nwant the request", out)
			}
			got, want := inputItems(t, out), inputItems(t, []byte(body))
			if len(got) != len(want) {
				t.Fatalf("%d items, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("item %d changed:\n%s\nwant\n%s", i, got[i], want[i])
				}
			}
			if strings.Contains(body, "<rg> & be") && !strings.Contains(string(out), `"instructions":"You are Codex`) {
				t.Errorf("instructions not written back verbatim: %s", out)
			}
		})
	}
}

// TestEncodeAfterTheCompactionAPI: the view comes back from the compaction API through a JSON
// encoder (compacted, HTML-escaped parts); kept messages still match their sources.
func TestEncodeAfterTheCompactionAPI(t *testing.T) {
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			r := decode(t, body)
			wire, err := json.Marshal(r.Messages)
			if err != nil {
				t.Fatal(err)
			}
			var back []compaction.Message
			if err := json.Unmarshal(wire, &back); err != nil {
				t.Fatal(err)
			}
			for i := range back {
				back[i].Pinned = false // views never carry the mark
			}
			out, err := r.Encode(back)
			if err != nil {
				t.Fatal(err)
			}
			if !sameJSON(t, out, []byte(body)) {
				t.Errorf("encoded\n%s\nwant the request", out)
			}
		})
	}
}

func TestStringInput(t *testing.T) {
	const body = `{"model": "gpt-5", "instructions": "Be terse.", "input": "Write a haiku about <go> & rust.", "stream": true}`
	r := decode(t, body)
	if !r.Stream() {
		t.Error("Stream() is false for stream: true")
	}
	out, err := r.Encode(r.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, out, []byte(body)) || !strings.Contains(string(out), `"input":"Write a haiku about <go> & rust."`) {
		t.Errorf("encoded %s, want the request", out)
	}
	view := []compaction.Message{r.Messages[0], {Role: compaction.RoleUser, Content: "[summary]"}, r.Messages[1]}
	out, err = r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"content":[{"type":"input_text","text":"[summary]"}],"role":"user","type":"message"},{"content":"Write a haiku about <go> & rust.","role":"user","type":"message"}]`
	if got := mustGet(t, out, "input"); !sameJSON(t, got, []byte(want)) {
		t.Errorf("input %s, want %s", got, want)
	}
}

func mustGet(t *testing.T, body []byte, key string) []byte {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	return fields[key]
}

// TestEncodeCompactedView: a view made of the system prompt, a summary and the tail encodes
// to input items where the kept ones are the request's bytes, the summary is a user message,
// and the calls of the tail keep their outputs.
func TestEncodeCompactedView(t *testing.T) {
	r := decode(t, codex)
	summary := compaction.Message{Role: compaction.RoleUser, Content: "[Compacted context] The task: fix TestParse. <done> & tested."}
	view := append([]compaction.Message{r.Messages[0], r.Messages[1], r.Messages[4], summary}, r.Messages[10:]...)
	for i := range view {
		view[i].Pinned = false
	}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkValid(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	items := inputItems(t, out)
	orig := inputItems(t, []byte(codex))
	want := make([]json.RawMessage, 0, 3+len(orig)-12)
	want = append(want, orig[0], orig[3], nil)
	want = append(want, orig[12:]...)
	if len(items) != len(want) {
		t.Fatalf("%d items, want %d:\n%s", len(items), len(want), out)
	}
	for i := range want {
		if want[i] != nil && !bytes.Equal(items[i], want[i]) {
			t.Errorf("item %d is\n%s\nwant the request's\n%s", i, items[i], want[i])
		}
	}
	if got := string(items[2]); got != `{"content":[{"type":"input_text","text":"[Compacted context] The task: fix TestParse. <done> & tested."}],"role":"user","type":"message"}` {
		t.Errorf("summary item %s", got)
	}
	if !strings.Contains(string(items[3]), `"role": "developer"`) {
		t.Errorf("the mid-conversation developer message lost its role: %s", items[3])
	}
	for _, f := range []string{`"store":false`, `"prompt_cache_key":"019a3c2e-7f4b-7d21-9c1e-5b2f3a4d6e8f"`, `"include":["reasoning.encrypted_content"]`,
		`"client_metadata":{"originator": "codex_cli_rs"}`, `"text":{"verbosity": "low"}`, `"stream":true`} {
		if !strings.Contains(string(out), f) {
			t.Errorf("field %s not passed through verbatim:\n%s", f, out)
		}
	}
}

// TestPlaceholders: an output the compaction offloaded is written as an output item of the
// type its call needs, with the placeholder as its output and the original's other fields.
func TestPlaceholders(t *testing.T) {
	const body = `{"input": [
		{"role": "user", "content": "go"},
		{"type": "function_call", "call_id": "f", "name": "read", "arguments": "{}"},
		{"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"},
		{"type": "local_shell_call", "id": "lsh_1", "call_id": "l", "status": "completed", "action": {"type": "exec", "command": ["ls"]}},
		{"type": "shell_call", "call_id": "s", "action": {"commands": ["make"]}},
		{"type": "apply_patch_call", "call_id": "p", "status": "completed", "operation": {"type": "create_file", "path": "a", "diff": "+x"}},
		{"type": "computer_call", "call_id": "k", "action": {"type": "click"}},
		{"type": "function_call_output", "id": "fco_1", "call_id": "f", "output": "long", "status": "completed"},
		{"type": "custom_tool_call_output", "call_id": "c", "output": "long"},
		{"type": "function_call_output", "call_id": "l", "output": "long"},
		{"type": "shell_call_output", "call_id": "s", "max_output_length": 100, "output": [{"stdout": "long", "stderr": "", "outcome": {"type": "exit", "exit_code": 2}}]},
		{"type": "apply_patch_call_output", "call_id": "p", "status": "failed", "output": "long"}
	]}`
	r := decode(t, body)
	ids := []string{"f", "c", "l", "s", "p", "k"}
	view := make([]compaction.Message, 0, 2+len(ids))
	view = append(view, r.Messages[0], r.Messages[1])
	for _, id := range ids {
		view = append(view, compaction.Message{Role: compaction.RoleTool, ToolCallID: id, Content: "[offloaded " + id + "]"})
	}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	items := inputItems(t, out)
	want := []string{
		`{"call_id":"f","output":"[offloaded f]","status":"completed","type":"function_call_output"}`,
		`{"call_id":"c","output":"[offloaded c]","type":"custom_tool_call_output"}`,
		`{"call_id":"l","output":"[offloaded l]","type":"function_call_output"}`, // as Codex answers local_shell_call
		`{"call_id":"s","max_output_length":100,"output":[{"stdout":"[offloaded s]","stderr":"","outcome":{"type":"exit","exit_code":2}}],"type":"shell_call_output"}`,
		`{"call_id":"p","output":"[offloaded p]","status":"failed","type":"apply_patch_call_output"}`,
		// computer_call "k": a screenshot cannot hold text and the request has no output
		// for it: nothing is written, the call is as unanswered as it was.
	}
	got := make([]string, 0, len(items))
	for _, it := range items[7:] {
		got = append(got, string(it))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outputs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRebuiltAssistant: an assistant message the compaction changed keeps what it can of its
// turn: reasoning in place, the calls still there as they came, the text replaced.
func TestRebuiltAssistant(t *testing.T) {
	r := decode(t, codex)
	orig := inputItems(t, []byte(codex))
	turn := r.Messages[7].Clone() // reasoning, call_B1, call_B2
	turn.ToolCalls = turn.ToolCalls[:1]
	turn.Content = "Reading the files."
	view := []compaction.Message{r.Messages[0], turn, r.Messages[8]}
	out, err := r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	items := inputItems(t, out)
	if len(items) != 4 || string(items[0]) != `{"content":[{"type":"output_text","text":"Reading the files."}],"role":"assistant","type":"message"}` ||
		!bytes.Equal(items[1], orig[7]) || !bytes.Equal(items[2], orig[8]) || !bytes.Equal(items[3], orig[10]) {
		t.Errorf("rebuilt turn:\n%s", out)
	}
	// A call the request does not have is a new function_call.
	view = []compaction.Message{{Role: compaction.RoleAssistant, ToolCalls: []compaction.ToolCall{{ID: "call_new", Type: "function",
		Function: compaction.FunctionCall{Name: "read", Arguments: `{"p":"<a>"}`}}}}, {Role: compaction.RoleTool, ToolCallID: "call_new", Content: "ok"}}
	out, err = r.Encode(view)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(mustGet(t, out, "input")); got != `[{"type":"function_call","call_id":"call_new","name":"read","arguments":"{\"p\":\"<a>\"}"},{"call_id":"call_new","output":"ok","type":"function_call_output"}]` {
		t.Errorf("new call: %s", got)
	}
}

func TestStateful(t *testing.T) {
	for _, tc := range []struct {
		body     string
		stateful bool
	}{
		{`{"previous_response_id": "resp_68a1", "input": "next"}`, true},
		{`{"conversation": "conv_123", "input": "next"}`, true},
		{`{"conversation": {"id": "conv_123"}, "input": [{"role": "user", "content": "next"}]}`, true},
		{`{"previous_response_id": "resp_1", "input": 7}`, true}, // passed through, whatever its input
		{`{"previous_response_id": null, "conversation": null, "input": "hi"}`, false},
		{`{"previous_response_id": "", "input": "hi"}`, false},
		{`{"store": true, "input": [{"role": "user", "content": "hi"}]}`, false},
	} {
		_, err := DecodeRequest([]byte(tc.body))
		if got := errors.Is(err, ErrStateful); got != tc.stateful {
			t.Errorf("%s: error %v, stateful %v, want %v", tc.body, err, got, tc.stateful)
		}
		if tc.stateful && errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: a stateful request is not an invalid one: %v", tc.body, err)
		}
		if !tc.stateful && err != nil {
			t.Errorf("%s: %v", tc.body, err)
		}
	}
}

// opaque has items the engine cannot represent: a compaction item (Codex after a remote
// compaction), a reference to a stored function call, an unknown item, and a call before the last of them whose
// output comes after it.
const opaque = `{"model": "gpt-5.1-codex", "store": true, "input": [
  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Refactor the parser."}]},
  {"type": "compaction", "encrypted_content": "gAAAAABcompacted-history"},
  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Continue."}]},
  {"id": "fc_stored_1"},
  {"type": "function_call", "call_id": "call_X", "name": "shell", "arguments": "{}"},
  {"type": "future_item", "payload": {"x": 1}},
  {"type": "function_call_output", "call_id": "call_X", "output": "done"},
  {"type": "function_call_output", "call_id": "call_unknown", "output": "from a stored call"},
  {"type": "message", "role": "developer", "content": "Keep going."},
  {"type": "message", "role": "user", "content": "Next step."}
]}`

func TestOpaqueItemsMakeTheKeptPrefix(t *testing.T) {
	r := decode(t, opaque)
	got := describe(r.Messages)
	for i, d := range got {
		if i <= 7 && !strings.HasPrefix(d, "system ") {
			t.Errorf("message %d (%s) is before the last opaque item: want a system message", i, d)
		}
	}
	if got[8] != "system Keep going." || got[9] != "user Next step." {
		t.Errorf("after the prefix: %q, %q", got[8], got[9])
	}
	if err := compaction.Validate(r.Messages); err != nil {
		t.Errorf("the engine refuses the history: %v", err)
	}
	if n, holder := r.Held(); n != 8 || holder != `"function_call_output" answering call "call_unknown"` {
		t.Errorf("Held() = %d, %q; want 8 items held by the output of a call not in the request", n, holder)
	}
	// The opening, which names the conversation, is the request's: the prefix that made its
	// first message a system message grows from one request to the next.
	if got := describe(r.Opening()); !reflect.DeepEqual(got, []string{"user Refactor the parser."}) {
		t.Errorf("Opening() = %q", got)
	}
	if n, holder := decode(t, agentsSDK).Held(); n != 0 || holder != "" {
		t.Errorf("a request without opaque items: Held() = %d, %q", n, holder)
	}
}

func TestDecodeRefusesBadRequests(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":                 `{"input": [`,
		"not an object":            `[1, 2]`,
		"null":                     `null`,
		"a string":                 `"hi"`,
		"input a number":           `{"input": 7}`,
		"input an object":          `{"input": {"role": "user"}}`,
		"item a string":            `{"input": ["hi"]}`,
		"item null":                `{"input": [null]}`,
		"unknown role":             `{"input": [{"role": "tool", "content": "hi"}]}`,
		"role not a string":        `{"input": [{"type": "message", "role": 1, "content": "hi"}]}`,
		"message without content":  `{"input": [{"type": "message", "role": "user"}]}`,
		"content a number":         `{"input": [{"role": "user", "content": 7}]}`,
		"part not an object":       `{"input": [{"role": "user", "content": ["hi"]}]}`,
		"type not a string":        `{"input": [{"type": 3, "role": "user", "content": "hi"}]}`,
		"no type, role or id":      `{"input": [{"content": "hi"}]}`,
		"call_id not a string":     `{"input": [{"type": "function_call", "call_id": 1, "name": "f", "arguments": "{}"}]}`,
		"instructions a number":    `{"instructions": 1, "input": "hi"}`,
		"instructions blocks":      `{"instructions": [{"type": "input_text", "text": "x"}], "input": "hi"}`,
		"shell output not chunks":  `{"input": [{"type": "shell_call", "call_id": "s", "action": {}}, {"type": "shell_call_output", "call_id": "s", "output": 5}]}`,
		"approval not a bool":      `{"input": [{"type": "mcp_approval_request", "id": "a", "name": "n", "arguments": "{}"}, {"type": "mcp_approval_response", "approval_request_id": "a", "approve": "yes"}]}`,
		"invalid UTF-8":            "{\"input\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
		"invalid UTF-8 in a field": "{\"model\": \"\xc3\", \"input\": \"hi\"}",
	} {
		if _, err := DecodeRequest([]byte(body)); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

func TestEncodeRefusesABadView(t *testing.T) {
	r := decode(t, `{"input": "hi"}`)
	for name, view := range map[string][]compaction.Message{
		"unknown role":   {{Role: "developer", Content: "x"}},
		"parts not JSON": {{Role: compaction.RoleUser, ContentParts: json.RawMessage(`[{`)}},
	} {
		if _, err := r.Encode(view); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

// checkValid checks what the Responses API requires of an input: every output answers a
// call made before it, once, and every call is answered.
func checkValid(body []byte) error {
	var req struct {
		Input []map[string]json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	called := map[string]bool{}
	for i, it := range req.Input {
		var typ, id string
		_ = json.Unmarshal(it["type"], &typ)
		switch typ {
		case "mcp_approval_request":
			_ = json.Unmarshal(it["id"], &id)
		case "mcp_approval_response":
			_ = json.Unmarshal(it["approval_request_id"], &id)
		default:
			_ = json.Unmarshal(it["call_id"], &id)
		}
		_, isCall := callTypes[typ]
		_, isOutput := outputTypes[typ]
		switch {
		case isCall:
			if _, dup := called[id]; dup {
				return fmt.Errorf("item %d: call %s made twice", i, id)
			}
			called[id] = false
		case isOutput:
			answered, ok := called[id]
			if !ok || answered {
				return fmt.Errorf("item %d: output for %s, which no earlier call made or which is answered", i, id)
			}
			called[id] = true
		}
	}
	for id, answered := range called {
		if !answered {
			return fmt.Errorf("call %s has no output", id)
		}
	}
	return nil
}

// checkKept checks that every item of the encoded input is an item of the request, byte for
// byte, or one a compaction writes (a user message, an output); and that every reasoning item
// or item reference is followed by the item that followed it in the request.
func checkKept(t *testing.T, orig []json.RawMessage, body []byte) error {
	t.Helper()
	next := map[string]string{}
	known := map[string]bool{}
	for i, it := range orig {
		known[string(it)] = true
		if i+1 < len(orig) {
			next[string(it)] = string(orig[i+1])
		}
	}
	items := inputItems(t, body)
	for i, it := range items {
		if known[string(it)] {
			if (strings.Contains(string(it), `"type": "reasoning"`) || strings.Contains(string(it), `"type": "item_reference"`)) &&
				(i+1 >= len(items) || string(items[i+1]) != next[string(it)]) {
				return fmt.Errorf("item %d, reasoning or a reference, is not followed by what followed it in the request", i)
			}
			continue
		}
		var v struct {
			Type, Role string
		}
		_ = json.Unmarshal(it, &v)
		if (v.Type != "message" || v.Role != "user") && !strings.HasSuffix(v.Type, "_output") {
			return fmt.Errorf("item %d is not the request's and not one a compaction writes: %s", i, it)
		}
	}
	return nil
}

// loopBody is a Codex request after turns tool rounds: a leading developer message, the task,
// optionally a compaction item, a developer message at turn 5, reasoning with
// encrypted_content before each (parallel, every third turn) call, and now and then an
// output large enough to be offloaded. As the Vercel AI SDK sends it (refs), the reasoning
// and every fourth turn's text are item references, the store left to its default.
func loopBody(turns int, withCompaction, refs bool) string {
	items := []string{
		`{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>workspace-write</permissions instructions>"}]}`,
		`{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Refactor the parser; keep the API stable."}]}`,
	}
	if withCompaction {
		items = append(items, `{"type": "compaction", "encrypted_content": "gAAAAAB-remote-compaction"}`)
	}
	for i := range turns {
		if i == 5 {
			items = append(items, `{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<collaboration_mode>never ask</collaboration_mode>"}]}`)
		}
		switch {
		case !refs:
			items = append(items, fmt.Sprintf(`{"type": "reasoning", "summary": [], "content": null, "encrypted_content": "gAAAAAB-enc-%d"}`, i))
		case i%4 == 1:
			items = append(items, fmt.Sprintf(`{"type": "item_reference", "id": "rs_%d"}`, i), fmt.Sprintf(`{"type": "item_reference", "id": "msg_%d"}`, i))
		default:
			items = append(items, fmt.Sprintf(`{"type": "item_reference", "id": "rs_%d"}`, i))
		}
		items = append(items, fmt.Sprintf(`{"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"cat file%d.go\"}", "call_id": "call_%d"}`, i, i))
		if i%3 == 0 {
			items = append(items, fmt.Sprintf(`{"type": "function_call", "name": "shell_command", "arguments": "{\"command\":\"wc file%d.go\"}", "call_id": "call_%db"}`, i, i))
		}
		lines := 25
		if i%10 == 4 {
			lines = 220 // over the offload threshold
		}
		items = append(items, fmt.Sprintf(`{"type": "function_call_output", "call_id": "call_%d", "output": %q}`, i, strings.Repeat(fmt.Sprintf("line %d of file%d.go\n", i, i), lines)))
		if i%3 == 0 {
			items = append(items, fmt.Sprintf(`{"type": "function_call_output", "call_id": "call_%db", "output": "25 lines"}`, i))
		}
	}
	store := `"store": false, "include": ["reasoning.encrypted_content"], `
	if refs {
		store = ""
	}
	return `{"model": "gpt-5.1-codex", "instructions": "You are Codex.", ` + store + `"stream": true, "prompt_cache_key": "k-1", "input": [` + strings.Join(items, ",") + `]}`
}

// TestCompactedByTheEngine runs the real engine over a long Codex tool loop, a request each
// turn, and checks every view encodes to an input the API accepts, made of the request's
// items byte for byte and what the compaction wrote, with the developer messages kept with
// their role and the opaque prefix kept whole, in place. The same loop with the AI SDK's
// item references is summarized too, each reference kept before what followed it.
func TestCompactedByTheEngine(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		withCompaction, refs bool
	}{{"codex", false, false}, {"compaction item", true, false}, {"item references", false, true}} {
		withCompaction := tc.withCompaction
		t.Run(tc.name, func(t *testing.T) {
			c, err := compaction.NewProgressiveCompactor(compaction.Config{ContextWindow: 6000, MinTailMessages: 6},
				compaction.WithStore(mem.New()), compaction.WithSessionID("responses"))
			if err != nil {
				t.Fatal(err)
			}
			tiers := map[compaction.Tier]bool{}
			placeholders := 0 // output items Encode wrote
			summarized := 0   // turns whose compaction summarized messages
			for turns := 1; turns <= 40; turns++ {
				body := loopBody(turns, withCompaction, tc.refs)
				r := decode(t, body)
				view, rec, err := c.CompactWithRecord(context.Background(), r.Messages)
				if err != nil {
					t.Fatalf("turn %d: %v", turns, err)
				}
				tiers[rec.Tier] = true
				if rec.Summarized > 0 {
					summarized++
				}
				out, err := r.Encode(view)
				if err != nil {
					t.Fatalf("turn %d: %v", turns, err)
				}
				if err := checkValid(out); err != nil {
					t.Fatalf("turn %d (%s): %v\n%s", turns, rec.Tier, err, out)
				}
				orig := inputItems(t, []byte(body))
				if err := checkKept(t, orig, out); err != nil {
					t.Fatalf("turn %d (%s): %v\n%s", turns, rec.Tier, err, out)
				}
				got := inputItems(t, out)
				if !bytes.Equal(got[0], orig[0]) {
					t.Fatalf("turn %d: the leading developer message is not first: %s", turns, got[0])
				}
				if withCompaction && (!bytes.Equal(got[1], orig[1]) || !bytes.Equal(got[2], orig[2])) {
					t.Fatalf("turn %d: the opaque prefix is not kept in place:\n%s", turns, out)
				}
				if turns > 5 && !strings.Contains(string(out), `"role": "developer", "content": [{"type": "input_text", "text": "<collaboration_mode>`) {
					t.Fatalf("turn %d (%s): the mid-conversation developer message is lost:\n%s", turns, rec.Tier, out)
				}
				for _, it := range got {
					if strings.HasPrefix(string(it), `{"call_id":`) {
						placeholders++
					}
				}
				if string(mustGet(t, out, "instructions")) != `"You are Codex."` || string(mustGet(t, out, "prompt_cache_key")) != `"k-1"` {
					t.Fatalf("turn %d: top-level fields changed:\n%s", turns, out)
				}
			}
			t.Logf("tiers over the loop: %v", tiers)
			if summarized == 0 {
				t.Errorf("no compaction of the loop summarized a message (tiers %v)", tiers)
			}
			if placeholders == 0 {
				t.Error("no output was ever offloaded: the test checks no placeholder")
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
		ok   bool
	}{
		{`{"id":"resp_1","object":"response","status":"completed","output":[],"usage":{"input_tokens":5123,"input_tokens_details":{"cached_tokens":4096},"output_tokens":210,"output_tokens_details":{"reasoning_tokens":128},"total_tokens":5333}}`, 5123, true},
		{`{"id":"resp_1","object":"response","usage":null}`, 0, false},
		{`{"id":"resp_1","object":"response"}`, 0, false},
		{`{"usage":{"input_tokens":0}}`, 0, false},
		{`not json`, 0, false},
	} {
		if n, ok := PromptTokens([]byte(tc.body)); n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.body, n, ok, tc.n, tc.ok)
		}
	}
}

func TestPromptTokensFromEvent(t *testing.T) {
	for _, tc := range []struct {
		data string
		n    int
		ok   bool
	}{
		{`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","usage":null}}`, 0, false},
		{`{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress","usage":null}}`, 0, false},
		{`{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"the \"usage\" of"}`, 0, false},
		{`{"type":"response.output_item.done","sequence_number":9,"output_index":0,"item":{"type":"function_call","arguments":"{\"usage\":{\"input_tokens\":3}}"}}`, 0, false},
		{`{"type":"response.completed","sequence_number":12,"response":{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":18234,"input_tokens_details":{"cached_tokens":17920},"output_tokens":52,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":18286}}}`, 18234, true},
		{`{"type":"response.incomplete","sequence_number":30,"response":{"id":"resp_2","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":900,"output_tokens":16,"total_tokens":916}}}`, 900, true},
		{`{"type":"response.done","response":{"id":"resp_3","status":"completed","usage":{"input_tokens":77,"output_tokens":1}}}`, 77, true},
		{`{"type":"response.failed","sequence_number":3,"response":{"id":"resp_4","status":"failed","usage":null}}`, 0, false},
		{`[DONE]`, 0, false},
		{``, 0, false},
	} {
		if n, ok := PromptTokensFromEvent([]byte(tc.data)); n != tc.n || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.data, n, ok, tc.n, tc.ok)
		}
	}
}

// BenchmarkDecodeEncode: a 200-turn Codex loop decoded and encoded back, the work a proxy
// adds to each request besides the compaction itself.
func BenchmarkDecodeEncode(b *testing.B) {
	body := []byte(loopBody(200, false, false))
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
