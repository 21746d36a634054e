// Package compactclient is a small Go client of the compaction-operator's compaction API, for
// agents: compact the history before every LLM call, offload large tool results at source,
// read offloaded results back and fetch the audit trail. It has no Kubernetes dependency;
// inside a pod it authenticates with the pod's ServiceAccount token.
package compactclient

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harness9/compaction-operator/compaction"
)

// DefaultTokenFile is where the operator's proxy injection (and the pod examples in docs/agents.md)
// mount the pod's ServiceAccount token projected for the compaction API's audience
// (DefaultTokenAudience). It is not the pod's kube-apiserver token
// (/var/run/secrets/kubernetes.io/serviceaccount/token), which the compaction API refuses and
// which no client should send to a server other than the kube-apiserver.
const DefaultTokenFile = "/var/run/secrets/compaction.harness9.io/token"

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// Client calls one compaction API server. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	hc        *http.Client
	custom    bool // hc came from WithHTTPClient
	token     string
	tokenFile string
	caFile    string
	caPool    *x509.CertPool
	plainHTTP bool
	// retries is how many times a 429 answer is tried again (after its Retry-After).
	retries int
}

// Option configures a Client.
type Option func(*Client)

// WithToken authenticates with a fixed bearer token.
func WithToken(token string) Option { return func(c *Client) { c.token, c.tokenFile = token, "" } }

// WithTokenFile reads the bearer token from path on every request, so a rotated projected
// token is picked up (the default is DefaultTokenFile).
func WithTokenFile(path string) Option { return func(c *Client) { c.token, c.tokenFile = "", path } }

// WithHTTPClient sends requests with hc (for timeouts or TLS settings of your own); the
// default has a 2-minute timeout. It excludes WithCAFile and WithCAPool: set the transport's
// RootCAs instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc, c.custom = hc, true } }

// WithCAFile verifies the server with the CA bundle (PEM) in path instead of the system's
// roots, such as the operator's published CA (key ca.crt of the ConfigMap
// compaction-operator-api-ca in the operator's namespace, mounted into the agent's pod). The
// file is read again for every new connection when it changed, so a rotated bundle is
// picked up.
func WithCAFile(path string) Option { return func(c *Client) { c.caFile, c.caPool = path, nil } }

// WithPlainHTTP allows an http:// base URL on another host than the loopback: the bearer
// token and the conversations then cross the network in clear text, so only for a network
// that encrypts on its own (a service mesh with mTLS). Loopback servers (127.0.0.0/8, ::1,
// localhost) are allowed without it.
func WithPlainHTTP() Option { return func(c *Client) { c.plainHTTP = true } }

// WithRetries sets how many times a call answered 429 (the server's flood protection) is
// sent again, after the answer's Retry-After (at most MaxRetryAfter); the default is
// DefaultRetries, 0 turns it off.
func WithRetries(n int) Option { return func(c *Client) { c.retries = max(n, 0) } }

// DefaultRetries and MaxRetryAfter bound the retries of a 429: a flood against the server
// delays an agent by seconds, not by minutes.
const (
	DefaultRetries = 3
	MaxRetryAfter  = 5 * time.Second
)

// WithCAPool verifies the server with pool instead of the system's roots.
func WithCAPool(pool *x509.CertPool) Option { return func(c *Client) { c.caPool, c.caFile = pool, "" } }

// New returns a client of the server at baseURL, such as
// "https://compaction-operator-api.compaction-system.svc:8082". An https server's
// certificate is always verified: with the system's roots, or the CA of WithCAFile or
// WithCAPool.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("compaction client: base URL %q must be http(s)://host[:port]", baseURL)
	}
	c := &Client{base: u, hc: &http.Client{Timeout: 2 * time.Minute}, tokenFile: DefaultTokenFile, retries: DefaultRetries}
	for _, o := range opts {
		o(c)
	}
	if u.Scheme == "http" && !c.plainHTTP && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("compaction client: base URL %q is plain HTTP: the token and the conversations would cross the network in clear text; "+
			"use https (the operator's API serves it by default), or allow it explicitly (compactclient.WithPlainHTTP, --plain-http)", baseURL)
	}
	if c.caFile != "" || c.caPool != nil {
		if c.custom {
			return nil, errors.New("compaction client: WithHTTPClient excludes WithCAFile and WithCAPool (set RootCAs in its transport)")
		}
		roots := &rootCAs{file: c.caFile, pool: c.caPool}
		if _, err := roots.get(); err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialTLSContext = roots.dialTLS
		c.hc.Transport = tr
	}
	return c, nil
}

// APIError is an error answer of the server.
type APIError struct {
	ErrorResponse
}

func (e *APIError) Error() string {
	return fmt.Sprintf("compaction API: %d %s: %s", e.Code, e.Reason, e.Message)
}

// IsStaleWatermark reports whether err is the server's answer to a delta request whose
// watermark is not the session's: send the full history.
func IsStaleWatermark(err error) bool { return isReason(err, ReasonStaleWatermark) }

func isReason(err error, reason string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Reason == reason
}

// CallOption changes one call of a Client.
type CallOption func(*callOptions)

type callOptions struct {
	conversation string
}

// ConversationParam is the query parameter that names the conversation of a session a
// request is for.
const ConversationParam = "conversation"

// InConversation makes a call work on conversation id of the session: its own state,
// records and offloaded tool results, apart from the session's other conversations. An
// empty id is the session's default conversation (the same as leaving the option out).
// The server accepts 1 to 64 letters, digits, '-', '_' and '.', not starting with '.', and
// answers anything else with a 400 (ReasonBadRequest).
func InConversation(id string) CallOption {
	return func(o *callOptions) { o.conversation = id }
}

// query is the query string of a call with opts.
func query(opts []CallOption) url.Values {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.conversation == "" {
		return nil
	}
	return url.Values{ConversationParam: []string{o.conversation}}
}

// Compact sends one turn's history and returns the view to send to the LLM.
func (c *Client) Compact(ctx context.Context, namespace, name string, req CompactRequest, opts ...CallOption) (*CompactResponse, error) {
	var resp CompactResponse
	if err := c.doJSON(ctx, http.MethodPost, c.path(namespace, name, "compact"), query(opts), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// OffloadToolResult stores a tool result over the policy's hookThresholdChars and returns
// the placeholder message to append to the history instead (or the message unchanged). The
// result is read back (GetToolResult) in the same conversation.
func (c *Client) OffloadToolResult(ctx context.Context, namespace, name string, msg compaction.Message, opts ...CallOption) (*OffloadResponse, error) {
	var resp OffloadResponse
	if err := c.doJSON(ctx, http.MethodPost, c.path(namespace, name, "toolresults"), query(opts), OffloadRequest{Message: msg}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// GetToolResult returns the full original bytes of an offloaded tool result.
func (c *Client) GetToolResult(ctx context.Context, namespace, name, toolCallID string, opts ...CallOption) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, c.path(namespace, name, "toolresults", toolCallID), query(opts), nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("compaction client: read tool result: %w", err)
	}
	return data, nil
}

// Records copies the session's JSONL audit trail, oldest first, to w: its default
// conversation's, or with InConversation that conversation's.
func (c *Client) Records(ctx context.Context, namespace, name string, w io.Writer, opts ...CallOption) error {
	resp, err := c.do(ctx, http.MethodGet, c.path(namespace, name, "records"), query(opts), nil)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("compaction client: read records: %w", err)
	}
	return nil
}

// History returns the archived messages of the session (or, with InConversation, of that
// conversation) within r: what its compactions summarized, in index order, at most
// r.Limit of them (Truncated and Next say where to go on). A session without an archive
// answers no messages. The caller needs "get" on agentsessions/toolresults.
func (c *Client) History(ctx context.Context, namespace, name string, r HistoryRange, opts ...CallOption) (*HistoryResponse, error) {
	q := rangeQuery(query(opts), r.From, r.To, r.Limit)
	var resp HistoryResponse
	if err := c.getJSON(ctx, c.path(namespace, name, "history"), q, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// SearchHistory returns the archived messages that match s, in index order, at most
// s.Limit of them. A pattern that does not compile, or an empty or over-long text, is a
// 400 (*APIError, ReasonBadRequest) that says why. The caller needs "get" on
// agentsessions/toolresults.
func (c *Client) SearchHistory(ctx context.Context, namespace, name string, s HistorySearch, opts ...CallOption) (*HistoryResponse, error) {
	q := rangeQuery(query(opts), s.From, s.To, s.Limit)
	q.Set("q", s.Text)
	if s.Regex {
		q.Set("regex", "1")
	}
	var resp HistoryResponse
	if err := c.getJSON(ctx, c.path(namespace, name, "history", "search"), q, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Reset forgets the compaction state of the session (or, with InConversation, of that
// conversation): its next turn starts again from the agent's full history, as before its
// first compaction. Send that full history next (a Session does). The trail gets a Reset
// record; archives and offloaded results are kept. The caller needs "create" on
// agentsessions/compact.
func (c *Client) Reset(ctx context.Context, namespace, name string, opts ...CallOption) (*ResetResponse, error) {
	resp, err := c.do(ctx, http.MethodPost, c.path(namespace, name, "reset"), query(opts), nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var out ResetResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("compaction client: decode response: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return &out, nil
}

// rangeQuery adds from, to and limit to q (made when nil), each only when set.
func rangeQuery(q url.Values, from, to, limit int) url.Values {
	if q == nil {
		q = url.Values{}
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"from", from}, {"to", to}, {"limit", limit}} {
		if p.v != 0 {
			q.Set(p.name, strconv.Itoa(p.v))
		}
	}
	return q
}

// getJSON sends a GET and decodes its JSON answer into out.
func (c *Client) getJSON(ctx context.Context, path string, q url.Values, out any) error {
	resp, err := c.do(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, out)
}

// ReportPassThrough tells the server that a proxy forwarded r.Count requests of the session
// to the LLM uncompacted, and why: the AgentSession's status.passThrough counts them and its
// PassThrough condition (the Proxy column of kubectl get agentsession) shows r.Reason. A proxy
// reports at most every few seconds, with the requests since its last report (the server
// coalesces the status writes anyway). r.Message is made to fit what the server accepts
// (control and other unprintable characters become spaces, invalid UTF-8 U+FFFD, and it is
// cut to MaxPassThroughMessageBytes), and r.Count is brought into 1..MaxPassThroughCount; a
// reason or protocol the server does not accept is a 400 (*APIError, ReasonBadRequest).
// The caller needs the same permission as for Compact (create on agentsessions/compact).
func (c *Client) ReportPassThrough(ctx context.Context, namespace, name string, r PassThroughReport) error {
	r.Message = FitPassThroughMessage(r.Message)
	r.Count = min(max(r.Count, 1), MaxPassThroughCount)
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("compaction client: encode request: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, c.path(namespace, name, "passthrough"), nil, body)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return resp.Body.Close()
}

// FitPassThroughMessage makes msg a PassThroughReport.Message the server accepts: printable
// UTF-8 on one line (unprintable characters become spaces, invalid bytes U+FFFD, surrounding
// space is trimmed), cut at a character boundary to at most MaxPassThroughMessageBytes bytes
// ending with "…" when it was longer.
func FitPassThroughMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	msg = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, msg)
	msg = strings.TrimSpace(msg)
	if len(msg) <= MaxPassThroughMessageBytes {
		return msg
	}
	const ellipsis = "…"
	cut := MaxPassThroughMessageBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + ellipsis
}

func (c *Client) path(namespace, name string, rest ...string) string {
	parts := make([]string, 0, 5+len(rest))
	parts = append(parts, "v1", "namespaces", url.PathEscape(namespace), "sessions", url.PathEscape(name))
	for _, r := range rest {
		parts = append(parts, url.PathEscape(r))
	}
	return "/" + strings.Join(parts, "/")
}

func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("compaction client: encode request: %w", err)
	}
	resp, err := c.do(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, out)
}

// decodeAnswer decodes resp's JSON body into out and closes it. The decoder stops after the
// value: the rest (the encoder's newline, the chunked body's end) is read so the connection
// goes back to the pool. A body closed before its end closes the connection, and the next
// request pays a new TLS handshake.
func decodeAnswer(resp *http.Response, out any) error {
	defer func() { _ = resp.Body.Close() }()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("compaction client: decode response: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	return nil
}

// maxDrain bounds what is read past a decoded answer to keep its connection: a server that
// sends more than this gets its connection closed instead.
const maxDrain = 64 << 10

// do sends a request and returns a 2xx response; other statuses become *APIError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Response, error) {
	u := *c.base
	// path is escaped (c.path): keep it so, with Path its unescaped form. Setting Path alone
	// escaped the escapes again, and a tool call ID with a '/' ("call/1", sent as
	// "call%2F1") reached the server as "call%2F1".
	escaped := strings.TrimRight(c.base.EscapedPath(), "/") + path
	unescaped, err := url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("compaction client: path %q: %w", escaped, err)
	}
	u.Path, u.RawPath = unescaped, escaped
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("compaction client: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	token, err := c.bearer()
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.send(ctx, req, body)
	if err != nil {
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		var hostname x509.HostnameError
		if errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) {
			return nil, fmt.Errorf("compaction client: %s %s: the server's certificate does not verify "+
				"(give the operator's CA bundle, key ca.crt of its ConfigMap compaction-operator-api-ca: compactctl --ca-file or $COMPACTION_CA_FILE, "+
				"Go compactclient.WithCAFile; and use a host name the certificate is for): %w", method, path, err)
		}
		return nil, fmt.Errorf("compaction client: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{}
	if json.Unmarshal(data, &ae.ErrorResponse) != nil || ae.Reason == "" {
		ae.ErrorResponse = ErrorResponse{Code: resp.StatusCode, Reason: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(data))}
	}
	ae.Code = resp.StatusCode
	return nil, ae
}

func (c *Client) bearer() (string, error) {
	if c.token != "" || c.tokenFile == "" {
		return c.token, nil
	}
	data, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("compaction client: read token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// send sends req, and again after a 429 answer's Retry-After (as the server's flood
// protection asks) up to c.retries times while ctx allows the wait. body is req's body, to
// send again.
func (c *Client) send(ctx context.Context, req *http.Request, body []byte) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := c.hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt >= c.retries {
			return resp, err
		}
		wait := retryAfter(resp.Header.Get("Retry-After"))
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return resp, nil // no time to wait: the 429 is the caller's answer
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		_ = resp.Body.Close()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("compaction client: %s %s: %w", req.Method, req.URL.Path, ctx.Err())
		case <-t.C:
		}
		req = req.Clone(ctx)
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
}

// retryAfter is a Retry-After header's wait in seconds, within (0, MaxRetryAfter]; 1 s when
// it is missing or not a number of seconds.
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n <= 0 {
		return time.Second
	}
	return min(time.Duration(n)*time.Second, MaxRetryAfter)
}

// loopback reports whether host is a loopback address or localhost.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
