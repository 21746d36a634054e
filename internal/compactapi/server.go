// Package compactapi serves the compaction engine over HTTP to agents: per-turn compaction,
// offload at source, reading offloaded results back and the JSONL audit trail. Callers
// present a Kubernetes bearer token; the server authenticates it with TokenReview and
// authorizes each call with SubjectAccessReview on an agentsessions subresource.
package compactapi

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/compactapi/authz"
	"github.com/harness9/compaction-operator/internal/compactapi/statusbatch"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
	"github.com/harness9/compaction-operator/internal/sharelru"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes is 8 MiB: a full history of the largest real transcripts we have
	// is about 1 MiB, delta requests are a few KiB, and a request costs up to a few times its
	// body in memory.
	DefaultMaxBodyBytes   = 8 << 20
	DefaultMaxMessages    = 10000
	DefaultRequestTimeout = 60 * time.Second
	DefaultReadTimeout    = 30 * time.Second
	DefaultUsageInterval  = 5 * time.Second
	DefaultStatusFlush    = statusbatch.DefaultFlushInterval
	// DefaultStatusInterval is the manager's api.statusInterval (see Config.StatusInterval).
	DefaultStatusInterval = 5 * time.Second
	// DefaultStateTrust is the manager's api.stateTrust (see Config.StateTrust).
	DefaultStateTrust = time.Minute
	// DefaultReviewQPS and DefaultReviewBurst limit the TokenReviews and
	// SubjectAccessReviews the API sends, on a client of their own: reviews never wait
	// behind, nor hold up, the controllers' and status writes' requests.
	DefaultReviewQPS   = 50
	DefaultReviewBurst = 100
	// The limits of reviews the authorizer sends (see authz).
	DefaultNewTokenRate      = authz.DefaultNewTokenRate
	DefaultNewTokenBurst     = authz.DefaultNewTokenBurst
	DefaultCallerReviewRate  = authz.DefaultCallerReviewRate
	DefaultCallerReviewBurst = authz.DefaultCallerReviewBurst
)

// Config configures the server.
type Config struct {
	// BindAddress is host:port to listen on.
	BindAddress string
	// Certificates serves the API's certificate (HTTPS, TLS 1.2 or later). The listener
	// opens only once it is ready, so a replica is not Ready before it has a certificate.
	// Required unless InsecureServeHTTP.
	Certificates CertificateSource
	// InsecureServeHTTP serves plain HTTP: tokens and conversations cross the network in
	// clear. An explicit opt-out only.
	InsecureServeHTTP bool
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// MaxInflightBytes is the in-flight budget: what the requests being served may hold in
	// memory at once (see inflight.go). A request it cannot take is answered 429.
	MaxInflightBytes int64
	// MaxInflightBytesPerCaller is what one caller's requests (callerOf: a ServiceAccount,
	// or one pod's bound tokens) may hold of MaxInflightBytes together; a caller's only
	// request is taken whatever its size. 0: MaxInflightBytes/DefaultCallerInflightShare;
	// < 0: no share.
	MaxInflightBytesPerCaller int64
	// MaxMessages bounds the messages of one request; the JSON values of a body and the
	// unknown fields its messages keep are bounded in proportion (see internal/compactrequest).
	MaxMessages int
	// RequestTimeout bounds one request, summarizer calls included.
	RequestTimeout time.Duration
	// ReadTimeout bounds how long a client may take to send a request, headers and body: a
	// stalled upload is cut off after it. The body is read before the session's lock is
	// taken, so a slow client never holds up the session's other requests.
	ReadTimeout time.Duration
	// UsageInterval is the least time between two status writes of a session for turns
	// that needed no compaction.
	UsageInterval time.Duration
	// SummariesOffTurn has sessions with an LLM summarizer never wait for it on a turn
	// (compaction.WithBackground): summaries are prepared ahead and made late, on this
	// replica's pool (api.summariesOffTurn).
	SummariesOffTurn bool
	// StateTrust is how long after storage last confirmed a conversation's state this
	// replica continues a delta request from its kept copy without the conditional read
	// (compaction.WithStateTrust): a turn that follows this replica's own answer, or sends
	// the full history of a conversation whose watermark has not moved, then costs no
	// storage round trip. Writes stay conditional, so another replica's save is never
	// overwritten. 0: every turn revalidates the state.
	StateTrust time.Duration
	// StatusFlushInterval is the least time between two status flushes: compactions of a
	// session within it are written as one status update.
	StatusFlushInterval time.Duration
	// StatusInterval is the least time between two status writes of one session by this
	// replica: what its compactions change meanwhile is written together (counters added,
	// the latest tier, usage and compaction kept). The first change after a quiet spell is
	// written at the next flush. 0: every flush writes every pending change.
	StatusInterval time.Duration
	// PassThroughQuiet is how long after a session's last pass-through report a compacted
	// request of the session sets its PassThrough condition False (reason Compacting); 0 is
	// DefaultPassThroughQuiet.
	PassThroughQuiet time.Duration
	// ClusterResourceNamespace holds a ClusterCompactionPolicy's Secrets by default.
	ClusterResourceNamespace string
	// TokenAudience is the audience a caller's token must be for (default
	// compactclient.DefaultTokenAudience); a token for the Kubernetes API itself is refused.
	TokenAudience string
	// ReviewQPS and ReviewBurst limit the TokenReviews and SubjectAccessReviews, sent on a
	// client of their own so they never share the controllers' and status writes' limiter.
	ReviewQPS   float64
	ReviewBurst int
	// NewTokenRate (per second) and NewTokenBurst limit the reviews of tokens the server has
	// no positive answer for; over it the request is answered 429. Tokens known to be good
	// are not limited.
	NewTokenRate  float64
	NewTokenBurst int
	// CallerReviewRate (per second) and CallerReviewBurst limit one caller's
	// SubjectAccessReviews that no cached answer spares (questions about sessions it did not
	// ask about before); over it the request is answered 429. 0: the defaults.
	CallerReviewRate  float64
	CallerReviewBurst int
	// SummarizerNamespaceSessions and SummarizerPolicySessions: the sessions of one
	// namespace, and of one policy, make at most this many times their policy's
	// summarizer.maxCallsPerHour paid calls an hour together on this replica (on top of each
	// session's own budget). 0: the defaults; < 0: no such limit.
	SummarizerNamespaceSessions int
	SummarizerPolicySessions    int
	// ClusterSecretNamespaces are the namespaces besides ClusterResourceNamespace whose
	// Secrets a ClusterCompactionPolicy may name; no other Secret is read.
	ClusterSecretNamespaces []string
	// AllowedEndpoints are the S3 endpoints and summarizer base URLs policies may name; the
	// summarizer's connections are checked against it when dialling (the stores' by
	// the list passed to policy.StoreOpener.Open). nil allows all.
	AllowedEndpoints *egress.Allowlist
	// NamespacedEndpoints are those a CompactionPolicy may name (policy.Access); nil means
	// AllowedEndpoints.
	NamespacedEndpoints *egress.Allowlist
	// Secrets reads the Secrets policies name (shared with the controllers); nil makes a
	// policy.SecretCache of its own.
	Secrets policy.SecretReader
}

// CertificateSource provides the serving certificate.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Ready is closed once GetCertificate has a certificate.
	Ready() <-chan struct{}
}

// Server is the compaction API. It runs on every manager replica (it needs no leader).
type Server struct {
	cfg       Config
	cache     client.Reader
	apiReader client.Reader
	writer    client.Client
	// background runs the summarizations off the turn (compaction.WithBackground).
	background *background
	// sessions resolves what a request needs of its session (resolveSession, engineFor).
	sessions *resolver
	auth     *authz.Authorizer
	recorder recorder.EventRecorder
	metrics  *Metrics
	log      logr.Logger

	inflight *budget
	// sharedBudgets are the namespaces' and policies' shares of the summarizer budget on
	// this replica (nil: only the sessions' own budgets).
	sharedBudgets *sharedBudgets
	status        *statusbatch.Batcher
	// lastViews remembers, per session, the estimated tokens of the view this replica
	// returned last: the prompt the agent's next usage.promptTokens measures, which
	// calibrates the session's estimate. Bounded; a session served elsewhere just skips a
	// calibration sample.
	lastViews *lru.Cache[string, int]
	// engines are the sessions' compactors on this replica, by session UID (see engine);
	// enginesMu makes finding or building a session's engine one step, so a session has one
	// engine, which serializes its compactions.
	enginesMu sync.Mutex
	engines   *sharelru.Cache[string, *engine]
	// serving is set once the listener is bound, for the readiness probe.
	serving atomic.Bool
}

// New builds the server on the manager's clients and cache. stores (shared with the
// controllers) opens the sessions' stores and summarizers builds the policies' summarizers:
// both are the manager's (package backends), so this package links neither client.
func New(mgr ctrl.Manager, cfg Config, stores policy.StoreOpener, summarizers policy.SummarizerFactory, reg prometheus.Registerer) (*Server, error) {
	if stores == nil || summarizers == nil {
		return nil, errors.New("compaction API: no store opener or summarizer factory")
	}
	orDefault(&cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	orDefault(&cfg.MaxInflightBytes, DefaultMaxInflightBytes)
	orDefault(&cfg.MaxMessages, DefaultMaxMessages)
	orDefault(&cfg.RequestTimeout, DefaultRequestTimeout)
	orDefault(&cfg.ReadTimeout, DefaultReadTimeout)
	orDefault(&cfg.UsageInterval, DefaultUsageInterval)
	orDefault(&cfg.StatusFlushInterval, DefaultStatusFlush)
	cfg.TokenAudience = cmp.Or(cfg.TokenAudience, compactclient.DefaultTokenAudience)
	orDefault(&cfg.ReviewQPS, DefaultReviewQPS)
	orDefault(&cfg.ReviewBurst, DefaultReviewBurst)
	orDefault(&cfg.NewTokenRate, DefaultNewTokenRate)
	orDefault(&cfg.NewTokenBurst, DefaultNewTokenBurst)
	orDefault(&cfg.CallerReviewRate, DefaultCallerReviewRate)
	orDefault(&cfg.CallerReviewBurst, DefaultCallerReviewBurst)
	if cfg.MaxInflightBytesPerCaller == 0 {
		cfg.MaxInflightBytesPerCaller = cfg.MaxInflightBytes / DefaultCallerInflightShare
	}
	if cfg.SummarizerNamespaceSessions == 0 {
		cfg.SummarizerNamespaceSessions = DefaultSummarizerNamespaceSessions
	}
	if cfg.SummarizerPolicySessions == 0 {
		cfg.SummarizerPolicySessions = DefaultSummarizerPolicySessions
	}
	if cfg.Secrets == nil {
		cfg.Secrets = policy.NewSecretCache(mgr.GetAPIReader(), 0)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register compaction API metrics: %w", err)
	}
	lastViews, err := lru.New[string, int](lastViewSessions)
	if err != nil {
		return nil, fmt.Errorf("last views cache: %w", err)
	}
	locations, err := policy.NewDecodedLocations(decodedLocations)
	if err != nil {
		return nil, err
	}
	index, err := policy.NewLocationIndex(context.Background(), mgr.GetCache(), cfg.ClusterResourceNamespace)
	if err != nil {
		return nil, err
	}
	reviewer, err := reviewClient(mgr, cfg.ReviewQPS, cfg.ReviewBurst)
	if err != nil {
		return nil, err
	}
	auth := authz.New(reviewer, cfg.TokenAudience, cfg.NewTokenRate, cfg.NewTokenBurst,
		authz.WithMetrics(m.TokenReviews, m.TokensRefused), authz.WithCallerLimit(cfg.CallerReviewRate, cfg.CallerReviewBurst))
	inflight := newBudget(cfg.MaxInflightBytes, m.Inflight)
	inflight.callerLimit = max(cfg.MaxInflightBytesPerCaller, 0)
	s := &Server{
		cfg:       cfg,
		cache:     mgr.GetCache(),
		apiReader: mgr.GetAPIReader(),
		writer:    mgr.GetClient(),
		sessions: &resolver{
			cache: mgr.GetCache(), apiReader: mgr.GetAPIReader(), secrets: cfg.Secrets, stores: stores, summarizers: summarizers,
			llm:           llmClient(cfg.AllowedEndpoints),
			llmNamespaced: llmClient(cmp.Or(cfg.NamespacedEndpoints, cfg.AllowedEndpoints)),
			locations:     locations, locationIndex: index,
			access: policy.Access{
				ClusterResourceNamespace: cfg.ClusterResourceNamespace, ClusterSecretNamespaces: cfg.ClusterSecretNamespaces,
				Endpoints: cfg.AllowedEndpoints, NamespacedEndpoints: cfg.NamespacedEndpoints,
			},
			metrics: m,
		},
		auth:          auth,
		recorder:      mgr.GetEventRecorder("compaction-api"),
		metrics:       m,
		log:           ctrl.Log.WithName("compaction-api"),
		inflight:      inflight,
		sharedBudgets: newSharedBudgets(cfg.SummarizerNamespaceSessions, cfg.SummarizerPolicySessions),
		lastViews:     lastViews,
		engines:       newEngines(),
		background:    newBackground(m),
	}
	s.status = newStatus(s)
	return s, nil
}

// orDefault sets *v to def when it is not positive: a Config field left zero (or set to
// a meaningless negative) takes its default.
func orDefault[T int | int64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// reviewClient is a client for TokenReviews and SubjectAccessReviews with a rate limiter of
// its own: a flood of unknown tokens must not use up the limiter that the controllers and
// the status writes share (client-go limits per rest.Config).
func reviewClient(mgr ctrl.Manager, qps float64, burst int) (client.Client, error) {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst, cfg.RateLimiter = float32(qps), burst, nil
	c, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("client for TokenReviews and SubjectAccessReviews: %w", err)
	}
	return c, nil
}

// llmClient is the summarizer's HTTP client: the default one, or one whose dialer checks
// allowed.
func llmClient(allowed *egress.Allowlist) *http.Client {
	if allowed == nil {
		return nil
	}
	return &http.Client{Transport: allowed.Transport(nil)}
}

// lastViewSessions bounds the sessions whose last view size a replica remembers (an int
// each).
const lastViewSessions = 20000

// decodedLocations bounds the decoded pinned locations a replica keeps (about 1 KB each).
const decodedLocations = 5000

// NeedLeaderElection is false: every replica serves the API.
func (s *Server) NeedLeaderElection() bool { return false }

// ReadyCheck is a readiness check (healthz.Checker) that passes once the API listens, so a
// replica gets traffic only when it can answer it.
func (s *Server) ReadyCheck(_ *http.Request) error {
	if !s.serving.Load() {
		return errors.New("compaction API not listening yet")
	}
	return nil
}

// The verbs and subresources the routes are authorized by (a SubjectAccessReview each).
const (
	verbGet                = "get"
	verbCreate             = "create"
	subresourceCompact     = "compact"
	subresourceToolResults = "toolresults"
)

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	const base = "/v1/namespaces/{namespace}/sessions/{name}"
	mux.Handle("POST "+base+"/compact", route(s, routeSpec{name: "compact", verb: verbCreate, subresource: subresourceCompact, needs: needsEngine}, s.parseCompact, s.compact))
	mux.Handle("POST "+base+"/toolresults", route(s, routeSpec{name: "toolresults", verb: verbCreate, subresource: subresourceToolResults, needs: needsEngine}, s.parseOffload, s.offload))
	mux.Handle("GET "+base+"/toolresults/{id}", route[struct{}](s, routeSpec{name: "toolresult", verb: verbGet, subresource: subresourceToolResults, needs: needsStore}, nil, s.toolResult))
	mux.Handle("GET "+base+"/records", route[struct{}](s, routeSpec{name: "records", verb: verbGet, subresource: "records", needs: needsStore}, nil, s.records))
	// What compactions summarized is conversation content, as an offloaded result is: the
	// same permission reads it back (history.go). Undoing a compaction changes it (reset.go).
	mux.Handle("GET "+base+"/history", route[struct{}](s, routeSpec{name: "history", verb: verbGet, subresource: subresourceToolResults, needs: needsStore}, nil, s.history))
	mux.Handle("GET "+base+"/history/search", route[struct{}](s, routeSpec{name: "historysearch", verb: verbGet, subresource: subresourceToolResults, needs: needsStore}, nil, s.historySearch))
	mux.Handle("POST "+base+"/reset", route[struct{}](s, routeSpec{name: "reset", verb: verbCreate, subresource: subresourceCompact, needs: needsStore}, nil, s.reset))
	// A pass-through report is part of compacting the session (a proxy that may compact may
	// say it did not): the same permission as compact, and a small body.
	mux.Handle("POST "+base+"/passthrough", route(s, routeSpec{name: "passthrough", verb: verbCreate, subresource: subresourceCompact, needs: needsSession,
		maxBody: maxPassThroughBody}, parsePassThrough, s.passThrough))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ReasonNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// Start serves until ctx ends, then shuts down gracefully.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: min(10*time.Second, s.cfg.ReadTimeout),
		// The whole request (headers and body) must arrive within ReadTimeout; net/http
		// lifts the read deadline once the body is read, so it does not cut long compactions.
		ReadTimeout: s.cfg.ReadTimeout,
		// A response must be written by then, so a client that stops reading cannot hold a
		// request (and its share of memory) forever: the body, the request's own deadline,
		// and time to write the answer.
		WriteTimeout: s.cfg.ReadTimeout + s.cfg.RequestTimeout + writeGrace,
		IdleTimeout:  120 * time.Second,
		BaseContext:  func(net.Listener) context.Context { return ctx },
		// net/http's own messages (TLS handshakes a client aborted, e.g. one without the
		// CA) go to the structured log, not plain text on stderr.
		ErrorLog: stdlog.New(logWriter{s.log.WithName("http")}, "", 0),
	}
	switch {
	case s.cfg.InsecureServeHTTP:
		s.log.Info("WARNING: serving the compaction API over plain HTTP (api.tls.insecureServeHTTP): bearer tokens and conversations cross the network unencrypted")
	case s.cfg.Certificates == nil:
		return errors.New("compaction API: no certificate source and plain HTTP not allowed")
	default:
		// Not listening (so not Ready) until there is a certificate to serve.
		select {
		case <-s.cfg.Certificates.Ready():
		case <-ctx.Done():
			return nil
		}
	}
	ln, err := net.Listen("tcp", s.cfg.BindAddress)
	if err != nil {
		return fmt.Errorf("compaction API: listen on %s: %w", s.cfg.BindAddress, err)
	}
	if !s.cfg.InsecureServeHTTP {
		ln = tls.NewListener(ln, &tls.Config{
			GetCertificate: s.cfg.Certificates.GetCertificate,
			MinVersion:     tls.VersionTLS12,
			NextProtos:     []string{"http/1.1"},
		})
	}
	s.log.Info("serving the compaction API", "address", ln.Addr().String(), "tls", !s.cfg.InsecureServeHTTP)
	s.serving.Store(true)
	defer s.serving.Store(false)

	stopStatus, statusDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(statusDone)
		s.status.Run(stopStatus)
	}()
	// The last status changes are written after the server has stopped taking requests.
	defer func() {
		close(stopStatus)
		<-statusDone
	}()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if s.background != nil {
		go s.background.run(ctx)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("compaction API: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("compaction API: shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("compaction API: %w", err)
	}
	return nil
}

// logWriter writes each line net/http logs as one structured log entry.
type logWriter struct{ log logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// writeGrace is how long after a request's deadline its answer may take to write.
const writeGrace = 30 * time.Second

// fail answers with err's status; unexpected errors are logged and answered 500.
func (s *Server) fail(w *statusWriter, log *requestLog, err error) {
	var ae *apiError
	var refused *authz.Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		writeError(w, ae.code, ae.reason, ae.msg)
	case errors.As(err, &refused):
		writeError(w, refused.Code, refused.Reason, refused.Msg)
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, ReasonTooLarge,
			fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, ReasonTimeout, fmt.Sprintf("request took longer than %s", s.cfg.RequestTimeout))
	default:
		s.log.WithValues(log.kv...).Error(err, "request failed")
		writeError(w, http.StatusInternalServerError, ReasonInternal, err.Error())
	}
}

// requestLog is what a failed request is logged with. It becomes a logger only when one is
// logged: logr.Logger.WithValues encodes its values at once (zap), and on every request it
// cost 3.5% of the API's CPU.
type requestLog struct{ kv []any }

func (l *requestLog) with(kv ...any) { l.kv = append(l.kv, kv...) }

// statusWriter remembers the status code for metrics.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) statusCode() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the underlying writer (flushing records).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
