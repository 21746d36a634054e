package agents

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/gemini"
)

// geminiModel is the scripted model on the Gemini API (Generative Language), as Gemini CLI
// calls it through @google/genai (and the AI SDK script through @ai-sdk/google): POST /v1beta/models/{model}:streamGenerateContent?alt=sse
// (server-sent events, each a GenerateContentResponse), :generateContent, :countTokens.
//
// Like a thinking model (Gemini 2.5 and 3), it signs each function call it makes with a
// thoughtSignature. It refuses a request whose model turn starts with a function call that
// carries no signature, or one it did not send: Gemini 3 wants the signature of the first
// call of each step back, and accepts the value that says to skip the check
// (gemini.SyntheticThoughtSignature, which Gemini CLI and the proxy write for a call they
// rebuild); this model holds every turn of the request to that, not only the current one.
type geminiModel struct {
	*model
	signatures *signatures
}

// signatures are the thought signatures the model sent.
type signatures struct {
	mu   sync.Mutex
	sent map[string]bool
}

func newGeminiModel(m *model) geminiModel {
	m.decode = func(raw []byte) ([]compaction.Message, error) {
		req, err := gemini.DecodeRequest(raw)
		if err != nil {
			return nil, err
		}
		return req.Messages, nil
	}
	return geminiModel{model: m, signatures: &signatures{sent: map[string]bool{}}}
}

func (m geminiModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	path := r.URL.Path
	seg := path[strings.LastIndexByte(path, '/')+1:]
	_, action, _ := strings.Cut(seg, ":")
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1beta/models/") && action == "countTokens":
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": promptTokens(raw)})
	case r.Method == http.MethodPost && strings.HasPrefix(path, "/v1beta/models/") && (action == "generateContent" || action == "streamGenerateContent"):
		m.generate(w, r, raw, action == "streamGenerateContent")
	default:
		m.sideRequest(r, raw)
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"code": 404, "message": "not found: " + r.Method + " " + path, "status": "NOT_FOUND"}})
	}
}

func (m geminiModel) generate(w http.ResponseWriter, r *http.Request, raw []byte, stream bool) {
	var req struct {
		Contents         []json.RawMessage `json:"contents"`
		Tools            []json.RawMessage `json:"tools"`
		GenerationConfig struct {
			ResponseMimeType string `json:"responseMimeType"`
		} `json:"generationConfig"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Contents) == 0 {
		m.problem("POST %s: undecodable body (%v): %.300s", r.URL.Path, err, raw)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "message": fmt.Sprint("bad request: ", err), "status": "INVALID_ARGUMENT"}})
		return
	}
	if refused := m.signatures.check(req.Contents); refused != "" {
		m.problem("POST %s: %s", r.URL.Path, refused)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": 400, "message": refused, "status": "INVALID_ARGUMENT"}})
		return
	}
	tools := toolNames(req.Tools)
	_, shell := tools["run_shell_command"]
	readTool := "read_file" // Gemini CLI's; the AI SDK script's is read_log
	if _, ok := tools["read_log"]; ok {
		readTool = "read_log"
	}
	readDecl, read := tools[readTool]
	var parts []map[string]any
	switch {
	case !shell && !read:
		m.sideRequest(r, raw)
		text := "Step log check"
		if req.GenerationConfig.ResponseMimeType == "application/json" {
			// Gemini CLI's JSON side requests (next speaker, loop detection): the model
			// has finished its turn, the user speaks next, no loop.
			text = `{"reasoning": "The model answered; the user speaks next.", "next_speaker": "user", "unproductive_state_analysis": "none", "unproductive_state_confidence": 0}`
		}
		parts = []map[string]any{{"text": text}}
	default:
		tool := "run_shell_command"
		if k := m.stepOf(raw) + 1; read && (k%4 == 0 || !shell) {
			tool = readTool
		}
		ask := m.next(r, raw, tool)
		switch {
		case ask == 0:
			parts = []map[string]any{{"text": finalText(m.steps)}}
		case tool == readTool:
			parts = []map[string]any{{"functionCall": map[string]any{"name": tool, "args": map[string]any{pathParam(readDecl): m.ws.logPath(ask)}},
				"thoughtSignature": m.signatures.sign(ask)}}
		default:
			parts = []map[string]any{{"functionCall": map[string]any{"name": tool, "args": map[string]any{"command": m.command(ask), "description": fmt.Sprintf("Print the log of step %d", ask)}},
				"thoughtSignature": m.signatures.sign(ask)}}
		}
	}
	prompt := promptTokens(raw)
	usage := map[string]any{"promptTokenCount": prompt, "candidatesTokenCount": 24, "totalTokenCount": prompt + 24}
	resp := func(parts []map[string]any, finish string, usage any) map[string]any {
		cand := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		if finish != "" {
			cand["finishReason"] = finish
		}
		out := map[string]any{"candidates": []any{cand}, "modelVersion": "gemini-2.5-pro", "responseId": fmt.Sprintf("resp-%d", len(raw))}
		if usage != nil {
			out["usageMetadata"] = usage
		}
		return out
	}
	if !stream {
		writeJSON(w, http.StatusOK, resp(parts, "STOP", usage))
		return
	}
	if r.URL.Query().Get("alt") != "sse" {
		// Without alt=sse the stream is a JSON array of responses.
		writeJSON(w, http.StatusOK, []any{resp(parts, "STOP", usage)})
		return
	}
	var b strings.Builder
	chunk := func(v any) { fmt.Fprintf(&b, "data: %s\r\n\r\n", mustJSON(v)) }
	if text, ok := parts[0]["text"].(string); ok && len(parts) == 1 {
		// Text streams in pieces, the last with the finish reason and the usage.
		half := len(text) / 2
		chunk(resp([]map[string]any{{"text": text[:half]}}, "", map[string]any{"promptTokenCount": prompt, "totalTokenCount": prompt}))
		chunk(resp([]map[string]any{{"text": text[half:]}}, "STOP", usage))
	} else {
		// A function call comes whole, as Gemini sends it.
		chunk(resp(parts, "STOP", usage))
	}
	writeSSE(w, b.String())
}

// sign returns a new thought signature for the call of step k (base64, as Gemini's).
func (s *signatures) sign(k int) string {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	sig := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "thought-step%d-%x", k, nonce))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent[sig] = true
	return sig
}

// check returns Gemini's message for contents with a model turn whose first function call
// does not carry a thought signature the model sent (or the one that skips the check), ""
// when there is none.
func (s *signatures) check(contents []json.RawMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, raw := range contents {
		var c struct {
			Role  string `json:"role"`
			Parts []struct {
				FunctionCall     json.RawMessage `json:"functionCall"`
				ThoughtSignature string          `json:"thoughtSignature"`
			} `json:"parts"`
		}
		if json.Unmarshal(raw, &c) != nil || c.Role != "model" {
			continue
		}
		for j, p := range c.Parts {
			if p.FunctionCall == nil {
				continue
			}
			if !s.sent[p.ThoughtSignature] && p.ThoughtSignature != gemini.SyntheticThoughtSignature {
				return fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:%s` , position %d. (contents[%d].parts[%d], signature %q)",
					p.FunctionCall, i+1, i, j, p.ThoughtSignature)
			}
			break // only a step's first call carries one
		}
	}
	return ""
}

// pathParam is the name of the path parameter of a read_file declaration (absolute_path in
// older Gemini CLIs, file_path in newer ones).
func pathParam(decl json.RawMessage) string {
	for _, name := range []string{"file_path", "absolute_path", "path"} {
		if strings.Contains(string(decl), `"`+name+`"`) {
			return name
		}
	}
	return "file_path"
}
