package proxy

import (
	"net/http"
	"net/url"
	"strings"
)

// surface is a provider's API as the proxy serves it: which upstream a request goes to and
// how its path maps onto the upstream's base URL.
type surface int

const (
	// surfaceOpenAI is the OpenAI API (chat completions, responses, models, files, ...).
	surfaceOpenAI surface = iota
	// surfaceAnthropic is the Anthropic API: /v1/messages and everything under it, /api/*
	// (Claude Code's HEAD /api/hello, its OAuth and telemetry routes) and any request
	// carrying the anthropic-version header (its /v1/models).
	surfaceAnthropic
	// surfaceGemini is the Gemini API (Generative Language): /v1beta/..., /v1alpha/...,
	// /upload/..., /v1/models/{model}:{action}, or any request carrying x-goog-api-key.
	surfaceGemini
)

func (s surface) String() string {
	switch s {
	case surfaceAnthropic:
		return "anthropic"
	case surfaceGemini:
		return "gemini"
	}
	return "openai"
}

// annotation is the pod annotation that names the upstream of s for the injected proxy.
func (s surface) annotation() string {
	switch s {
	case surfaceAnthropic:
		return "compaction.harness9.io/anthropic-upstream"
	case surfaceGemini:
		return "compaction.harness9.io/gemini-upstream"
	}
	return "compaction.harness9.io/upstream"
}

// baseURLVariable is the environment variable the SDKs of s read their base URL from.
func (s surface) baseURLVariable() string {
	switch s {
	case surfaceAnthropic:
		return "ANTHROPIC_BASE_URL"
	case surfaceGemini:
		return "GOOGLE_GEMINI_BASE_URL"
	}
	return "OPENAI_BASE_URL"
}

// surfaceOf is the API r belongs to.
func surfaceOf(r *http.Request) surface {
	p := r.URL.Path
	switch {
	case hasSegmentPrefix(p, "/v1beta"), hasSegmentPrefix(p, "/v1alpha"), hasSegmentPrefix(p, "/upload"),
		r.Header.Get("x-goog-api-key") != "",
		hasSegmentPrefix(p, "/v1/models") && strings.Contains(lastSegment(p), ":"):
		return surfaceGemini
	case r.Header.Get("anthropic-version") != "",
		hasSegmentPrefix(p, "/v1/messages"), hasSegmentPrefix(p, "/api"):
		return surfaceAnthropic
	}
	return surfaceOpenAI
}

// hasSegmentPrefix reports whether path is prefix or starts with prefix followed by a '/':
// /v1beta is not under /v1.
func hasSegmentPrefix(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func lastSegment(path string) string {
	return path[strings.LastIndexByte(path, '/')+1:]
}

// upstreamPath is the path on base a request for path goes to.
//
// The OpenAI and Anthropic upstreams are base URLs with their version (https://api.openai.com/v1,
// https://api.anthropic.com/v1, https://gateway.example/openai/v1): a request under /v1 has
// that segment replaced by the base's path. An Anthropic path under /api (Claude Code's
// /api/hello) goes beside the version, under the base's path without a last /v1 segment; any
// other path under the base's path. The Gemini upstream
// is a base URL without version (https://generativelanguage.googleapis.com): the request's
// path, version included, goes under it as it is.
func upstreamPath(base *url.URL, s surface, path string) string {
	if s == surfaceGemini {
		return joinPath(base.Path, path)
	}
	if rest, ok := strings.CutPrefix(path, "/v1"); ok && (rest == "" || rest[0] == '/') {
		return joinPath(base.Path, rest)
	}
	if s == surfaceAnthropic && hasSegmentPrefix(path, "/api") {
		return joinPath(strings.TrimSuffix(strings.TrimRight(base.Path, "/"), "/v1"), path)
	}
	// A client whose base URL lacks the /v1 (http://127.0.0.1:4141) asks for
	// /chat/completions or /messages: it takes its base URL for a versioned one, as the
	// Vercel AI SDK takes ANTHROPIC_BASE_URL, so the request goes under the base with its
	// version, as it did before the proxy.
	return joinPath(base.Path, path)
}

// joinPath joins a base path and a request path with one slash.
func joinPath(base, rest string) string {
	if rest == "" {
		if base == "" {
			return "/"
		}
		return base
	}
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(rest, "/")
}

// geminiAction is the method of a Gemini model request (/v1beta/models/{model}:{action}),
// or "" for another path.
func geminiAction(path string) string {
	seg := lastSegment(path)
	i := strings.LastIndexByte(seg, ':')
	if i < 0 || !strings.Contains(path, "/models/") {
		return ""
	}
	return seg[i+1:]
}

// isWebSocket reports whether r asks to upgrade to a WebSocket (Codex tries the Responses API
// over one first and falls back to HTTP when refused).
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") ||
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") && r.Header.Get("Upgrade") != ""
}

// protocolFor is the protocol that compacts r on surface s, or nil for a request the proxy
// passes through (anything but a conversation sent for generation or counting).
func (p *Proxy) protocolFor(r *http.Request, s surface) protocol {
	if r.Method != http.MethodPost {
		return nil
	}
	path := r.URL.Path
	switch s {
	case surfaceOpenAI:
		switch {
		case strings.HasSuffix(path, "/chat/completions"):
			return openAIProtocol{cacheKey: p.cfg.PromptCacheKey}
		case strings.HasSuffix(path, "/responses"):
			return responsesProtocol{}
		}
	case surfaceAnthropic:
		switch {
		case strings.HasSuffix(path, "/messages"):
			return anthropicProtocol{}
		case strings.HasSuffix(path, "/messages/count_tokens"):
			return anthropicProtocol{count: true}
		}
	case surfaceGemini:
		switch action := geminiAction(path); action {
		case "generateContent", "streamGenerateContent", "countTokens":
			return geminiProtocol{action: action, sse: r.URL.Query().Get("alt") == "sse"}
		}
	}
	return nil
}
