package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/harness9/compaction-operator/compaction"
	fsstore "github.com/harness9/compaction-operator/compaction/storage/fs"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/compaction/summarize/openai"
)

// Summarizer names accepted by --summarizer.
const (
	summarizerExtractive = "extractive"
	summarizerOpenAI     = "openai"
)

// Defaults of the flags that are not engine knobs.
const (
	defaultContextWindow = 128000
	defaultSessionID     = "local"
	defaultOpenAIBaseURL = "https://api.openai.com/v1"
	defaultOpenAITimeout = 60 * time.Second
)

// engineFlags are the flags shared by compact and simulate: every knob of the compactor,
// where its results go, and which summarizer it uses.
type engineFlags struct {
	rawHistory       bool
	contextWindow    int
	warn             int
	soft             int
	full             int
	emergency        int
	offloadThreshold int
	hookThreshold    int
	previewLines     int
	minTail          int
	maxSummaryChars  int
	pinRule          string
	pinPercent       int
	sessionID        string
	storeDir         string
	summarizer       string

	openaiBaseURL         string
	openaiModel           string
	openaiAPIKeyFile      string
	openaiTimeout         time.Duration
	openaiMaxRetries      int
	openaiMaxOutputTokens int
	openaiMaxTokensField  string

	verbosity int

	fs *flag.FlagSet
}

// addEngineFlags registers the shared flags on fs. The defaults are the engine's own
// (compaction.DefaultConfig), so the CLI never drifts from the library.
func addEngineFlags(fs *flag.FlagSet) *engineFlags {
	d := compaction.DefaultConfig(defaultContextWindow)
	f := &engineFlags{fs: fs}
	fs.IntVar(&f.contextWindow, "context-window", d.ContextWindow, "model context window in `tokens` (usage = estimated tokens / window, estimate = bytes / 4)")
	fs.IntVar(&f.warn, "warn", percent(d.WarnThreshold), "Warn tier threshold, `percent` of the window: offload large tool results in the head")
	fs.IntVar(&f.soft, "soft", percent(d.SoftThreshold), "Soft tier threshold, `percent` of the window: also summarize the oldest half of the head")
	fs.IntVar(&f.full, "full", percent(d.FullThreshold), "Full tier threshold, `percent` of the window: summarize the whole head into anchors + summary")
	fs.IntVar(&f.emergency, "emergency", percent(d.EmergencyThreshold), "Emergency tier threshold, `percent` of the window: forced truncation, no summarizer call\n(the four thresholds must be strictly increasing, between 1 and 100)")
	fs.IntVar(&f.offloadThreshold, "offload-threshold", d.OffloadThreshold, "tool results in the head longer than this many `bytes` are offloaded to the store during compaction")
	fs.IntVar(&f.hookThreshold, "hook-threshold", d.HookThreshold, "tool results longer than this many `bytes` are offloaded at source, before they enter the history,\nas the agent's OffloadHook does (0 disables the hook)")
	fs.IntVar(&f.previewLines, "preview-lines", d.PreviewLines, "leading `lines` of an offloaded tool result kept in its placeholder (1..1000)")
	fs.IntVar(&f.minTail, "min-tail", d.MinTailMessages, "most recent `messages` always kept verbatim")
	fs.IntVar(&f.maxSummaryChars, "max-summary-chars", d.MaxSummaryChars, "upper bound of the prose summary in `bytes` (at least 200)")
	fs.StringVar(&f.pinRule, "pin-rule", string(d.PinRule), "messages kept verbatim after the system messages once compacted: `rule` TaskAndInstructions (the task\nand each distinct later user message), Task, Marked (only messages with \"pinned\": true) or None;\nmarked messages are pinned under every rule but None")
	fs.IntVar(&f.pinPercent, "pin-percent", percent(d.PinBudget), "pin budget, `percent` of the window (1..50); a pin over it keeps its head and tail, its full text\nis offloaded and readable back by the tool_call_id its note names")
	fs.BoolVar(&f.rawHistory, "raw-history", false, "compact the full raw history every turn, as the seed spec does, instead of the derived view\nafter the watermark (a session past the window then stays in Emergency); for comparison")
	fs.StringVar(&f.sessionID, "session-id", defaultSessionID, "session `ID` the store files offloaded results, records and state under (letters, digits, '-', '_', '.')")
	fs.StringVar(&f.storeDir, "store", defaultStoreDir(), "store root `DIR`: results go to DIR/.harness9/{tool_results,compaction_records,state}/;\nby default a per-user cache directory, never the current one; an empty value keeps everything\nin memory and writes nothing (dry run)")
	fs.StringVar(&f.summarizer, "summarizer", summarizerExtractive, "summarizer: `extractive|openai` (extractive is deterministic and needs no network)")
	fs.StringVar(&f.openaiBaseURL, "openai-base-url", defaultOpenAIBaseURL, "`URL` of the OpenAI-compatible API for --summarizer openai (vLLM, Ollama, LiteLLM, OpenAI);\n\"/v1/chat/completions\" is appended as needed")
	fs.StringVar(&f.openaiModel, "openai-model", "", "`model` name for --summarizer openai (required with it)")
	fs.StringVar(&f.openaiAPIKeyFile, "openai-api-key-file", "", "`file` holding the API key for --summarizer openai; otherwise the key is read from\n$OPENAI_API_KEY, and without one no Authorization header is sent (local servers)")
	fs.DurationVar(&f.openaiTimeout, "openai-timeout", defaultOpenAITimeout, "per-attempt `timeout` of a summarizer request")
	fs.IntVar(&f.openaiMaxRetries, "openai-max-retries", 2, "`retries` of a failed summarizer request (network error, timeout, 429, 5xx); 0 disables retries")
	fs.IntVar(&f.openaiMaxOutputTokens, "openai-max-output-tokens", 1024, "bound of a summarizer answer, in `tokens`, sent as --openai-max-tokens-field")
	fs.StringVar(&f.openaiMaxTokensField, "openai-max-tokens-field", string(openai.MaxTokens), "request `field` of --openai-max-output-tokens: max_tokens (vLLM, Ollama, LiteLLM, OpenAI's\nchat models) or max_completion_tokens (OpenAI's reasoning models, which refuse max_tokens)")
	fs.IntVar(&f.verbosity, "v", 0, "log `level` on stderr: 0 errors only, 1 also what failed open (memory extraction, todos)")
	return f
}

// defaultStoreDir is --store's default: compaction-operator in the per-user cache directory
// ($XDG_CACHE_HOME or ~/.cache on Linux). Not the current directory: a run inside a checkout
// would leave a store there to be committed by mistake. Empty (memory, nothing written) on a
// system without one ($HOME unset).
func defaultStoreDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "compaction-operator")
}

func percent(ratio float64) int { return int(math.Round(ratio * 100)) }

// config validates the flags and returns the engine configuration. Every problem is a usage
// error, and all of them are reported at once. The engine's knobs are checked by the
// engine's own rules (compaction.Config.Validate), each reported against the flag that sets
// it; only what the CLI adds is checked here.
func (f *engineFlags) config() (compaction.Config, error) {
	var errs []error
	own := map[string]bool{} // engine fields whose flag broke a CLI rule: reported once
	if f.contextWindow < 1 { // the engine reads 0 as "no window"; the CLI needs one
		errs = append(errs, fmt.Errorf("--context-window %d must be at least 1 token", f.contextWindow))
		own["ContextWindow"] = true
	}
	if f.hookThreshold < 0 {
		errs = append(errs, fmt.Errorf("--hook-threshold %d must not be negative (0 disables the hook)", f.hookThreshold))
		own["HookThreshold"] = true
	}
	// The engine treats 0 as "use the default", so 0 preview lines cannot be expressed.
	if f.previewLines == 0 {
		errs = append(errs, errors.New("--preview-lines 0 must be between 1 and 1000 (the engine reads 0 as its default)"))
		own["PreviewLines"] = true
	}
	if err := compaction.ValidateSessionID(f.sessionID); err != nil {
		errs = append(errs, fmt.Errorf("--session-id: %w", err))
	}
	errs = append(errs, f.checkSummarizerFlags()...)

	// Start from the engine's defaults: a knob without a flag (TargetThreshold, MinSaving)
	// keeps its default instead of a zero value Validate rejects.
	cfg := compaction.DefaultConfig(f.contextWindow)
	cfg.WarnThreshold = float64(f.warn) / 100
	cfg.SoftThreshold = float64(f.soft) / 100
	cfg.FullThreshold = float64(f.full) / 100
	cfg.EmergencyThreshold = float64(f.emergency) / 100
	cfg.OffloadThreshold = f.offloadThreshold
	cfg.HookThreshold = f.hookThreshold
	cfg.PreviewLines = f.previewLines
	cfg.MinTailMessages = f.minTail
	cfg.MaxSummaryChars = f.maxSummaryChars
	cfg.RawHistory = f.rawHistory
	cfg.PinRule = compaction.PinRule(f.pinRule)
	cfg.PinBudget = float64(f.pinPercent) / 100
	if cfg.HookThreshold == 0 { // disabled: the hook is the CLI's, the engine wants a value
		cfg.HookThreshold = compaction.DefaultConfig(0).HookThreshold
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, f.flagErrors(err, own)...)
	}
	if len(errs) > 0 {
		return compaction.Config{}, &usageError{err: errors.Join(errs...)}
	}
	return cfg, nil
}

// flagErrors names, in each of the engine's Validate errors, the flag that sets the field at
// fault and its value as given ("--soft 60: soft threshold 0.60 must be above warn threshold
// 0.70"), and drops those of the fields in skip.
func (f *engineFlags) flagErrors(err error, skip map[string]bool) []error {
	all := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		all = joined.Unwrap()
	}
	var out []error
	for _, e := range all {
		var fe *compaction.FieldError
		if !errors.As(e, &fe) {
			out = append(out, e)
			continue
		}
		if skip[fe.Field] {
			continue
		}
		if fl := f.fs.Lookup(flagOfField(fe.Field)); fl != nil {
			e = fmt.Errorf("--%s %s: %w", fl.Name, fl.Value, e)
		} else {
			e = fmt.Errorf("%w (%s is the engine's default: no flag sets it)", e, fe.Field)
		}
		out = append(out, e)
	}
	return out
}

// flagOfField is the flag that sets the engine's Config field, or "" for a field the CLI
// leaves at its default.
func flagOfField(field string) string {
	switch field {
	case "ContextWindow":
		return "context-window"
	case "WarnThreshold":
		return "warn"
	case "SoftThreshold":
		return "soft"
	case "FullThreshold":
		return "full"
	case "EmergencyThreshold":
		return "emergency"
	case "OffloadThreshold":
		return "offload-threshold"
	case "HookThreshold":
		return "hook-threshold"
	case "PreviewLines":
		return "preview-lines"
	case "MinTailMessages":
		return "min-tail"
	case "MaxSummaryChars":
		return "max-summary-chars"
	case "PinRule":
		return "pin-rule"
	case "PinBudget":
		return "pin-percent"
	}
	return ""
}

// checkSummarizerFlags rejects an unknown summarizer and --openai-* flags that would be
// silently ignored.
func (f *engineFlags) checkSummarizerFlags() []error {
	var errs []error
	switch f.summarizer {
	case summarizerExtractive:
		var set []string
		f.fs.Visit(func(fl *flag.Flag) {
			if strings.HasPrefix(fl.Name, "openai-") {
				set = append(set, "--"+fl.Name)
			}
		})
		if len(set) > 0 {
			errs = append(errs, fmt.Errorf("%s only apply to --summarizer openai", strings.Join(set, ", ")))
		}
	case summarizerOpenAI:
		if strings.TrimSpace(f.openaiModel) == "" {
			errs = append(errs, errors.New("--openai-model is required with --summarizer openai"))
		}
		if f.openaiTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--openai-timeout %s must be positive", f.openaiTimeout))
		}
		if f.openaiMaxRetries < 0 {
			errs = append(errs, fmt.Errorf("--openai-max-retries %d must not be negative", f.openaiMaxRetries))
		}
		if f.openaiMaxOutputTokens < 1 {
			errs = append(errs, fmt.Errorf("--openai-max-output-tokens %d must be at least 1", f.openaiMaxOutputTokens))
		}
	default:
		errs = append(errs, fmt.Errorf("--summarizer %q: want %s or %s", f.summarizer, summarizerExtractive, summarizerOpenAI))
	}
	return errs
}

// newSummarizer builds the selected summarizer. It has no side effects besides reading the
// API key file, so it runs before the transcript is read.
func (f *engineFlags) newSummarizer() (compaction.Summarizer, error) {
	if f.summarizer != summarizerOpenAI {
		return compaction.ExtractiveSummarizer{}, nil
	}
	retries := f.openaiMaxRetries
	if retries == 0 {
		retries = -1 // the library reads 0 as "default"; the flag's 0 means none
	}
	s, err := openai.New(openai.Config{
		BaseURL:         f.openaiBaseURL,
		Model:           f.openaiModel,
		APIKeyFile:      f.openaiAPIKeyFile,
		Timeout:         f.openaiTimeout,
		MaxRetries:      retries,
		MaxOutputTokens: f.openaiMaxOutputTokens,
		MaxTokensField:  openai.TokenLimitField(f.openaiMaxTokensField),
	})
	if err != nil {
		return nil, &usageError{err: err}
	}
	return s, nil
}

// openStore opens the store named by --store. Call it only once the input is known to be
// good: the filesystem store creates its directory. When --store was not given, it says on
// notices where the default store writes, so files outside the current directory are no
// surprise.
func (f *engineFlags) openStore(notices io.Writer) (compaction.Store, string, error) {
	if f.storeDir == "" {
		return mem.New(), "memory (nothing written)", nil
	}
	s, err := fsstore.New(f.storeDir)
	if err != nil {
		return nil, "", fmt.Errorf("open store: %w", err)
	}
	if !f.isSet("store") {
		warnf(notices, "compactctl: writing offloaded results, records and state under %s (--store DIR to choose, --store '' for none)\n", s.Dir())
	}
	return s, s.Dir(), nil
}

// isSet says whether the flag name was given on the command line.
func (f *engineFlags) isSet(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// logger logs the engine's messages on w, prefixed with the program name.
func (f *engineFlags) logger(w io.Writer) logr.Logger {
	// Log lines are diagnostics like warnf's: a logr sink has no way to return an error.
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			warnf(w, "compactctl: %s: %s\n", prefix, args)
			return
		}
		warnf(w, "compactctl: %s\n", args)
	}, funcr.Options{Verbosity: f.verbosity})
}

// readTranscript decodes the transcript at path ("-" is stdin). Errors name the file and
// the line (or array element) at fault.
func readTranscript(path string, stdin io.Reader) ([]compaction.Message, error) {
	var r io.Reader
	name := path
	if path == "-" {
		r, name = stdin, "<stdin>"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read transcript: %w", err)
		}
		// Opened read-only and fully read before returning: a failed Close loses nothing,
		// and the decode result is what the caller needs.
		defer func() { _ = f.Close() }()
		r = f
	}
	msgs, err := compaction.DecodeTranscript(r, compaction.DecodeOptions{})
	if err != nil {
		return nil, fmt.Errorf("transcript %s: %w", name, err)
	}
	return msgs, nil
}

// transcriptArg checks that exactly one positional argument, the transcript, was given.
func transcriptArg(args []string) (string, error) {
	switch len(args) {
	case 0:
		return "", usageErrorf("missing TRANSCRIPT argument (a file, or - for standard input)")
	case 1:
		if args[0] == "" {
			return "", usageErrorf("empty TRANSCRIPT argument")
		}
		return args[0], nil
	default:
		return "", usageErrorf("want one TRANSCRIPT argument, got %d: %s", len(args), strings.Join(args, " "))
	}
}

// hookOffloader applies the agent's OffloadHook to tool results entering the history.
type hookOffloader struct {
	off       *compaction.Offloader
	threshold int // 0: disabled

	count int
	bytes int
}

// apply returns m, or its placeholder when the hook offloads it.
func (h *hookOffloader) apply(ctx context.Context, m compaction.Message) (compaction.Message, error) {
	if h.threshold == 0 || h.off == nil || m.Role != compaction.RoleTool {
		return m, nil
	}
	out, entry, err := h.off.Hook(ctx, m, h.threshold)
	if err != nil {
		return m, fmt.Errorf("offload tool result %q at source: %w", m.ToolCallID, err)
	}
	if entry != nil {
		h.count++
		h.bytes += entry.Bytes
	}
	return out, nil
}

// countingSummarizer counts the calls of a summarizer and its failures, including output
// the engine cannot use (no anchors and no summary), which also makes it fall back. It is a
// compaction.ResultSummarizer whatever it wraps, so the engine still gets the base's usage
// (an OpenAI summarizer) or anchors as values (the extractive one) through it.
type countingSummarizer struct {
	compaction.Summarizer
	calls    atomic.Int64
	failures atomic.Int64
}

func newCountingSummarizer(base compaction.Summarizer) *countingSummarizer {
	return &countingSummarizer{Summarizer: base}
}

func (c *countingSummarizer) Summarize(ctx context.Context, req compaction.SummaryRequest) (string, error) {
	res, err := c.SummarizeResult(ctx, req)
	if err != nil {
		return "", err
	}
	if res.Text == "" {
		return compaction.FormatSummary(res.Anchors, res.Prose), nil
	}
	return res.Text, nil
}

func (c *countingSummarizer) SummarizeResult(ctx context.Context, req compaction.SummaryRequest) (compaction.SummaryResult, error) {
	c.calls.Add(1)
	res, err := compaction.Summarize(ctx, c.Summarizer, req)
	if err != nil {
		c.failures.Add(1)
	} else if anchors, summary, _ := res.Parsed(); summary == "" && compaction.CountAvailable(anchors) == 0 {
		c.failures.Add(1)
	}
	return res, err
}

// humanCount renders n like the engine's notifications do: 812, 45.2K, 1.3M.
func humanCount(n int) string {
	switch {
	case n < 1000 && n > -1000:
		return fmt.Sprintf("%d", n)
	case n < 1_000_000 && n > -1_000_000:
		return fmt.Sprintf("%.1fK", float64(n)/1000)
	default:
		return fmt.Sprintf("%.1fM", float64(n)/1_000_000)
	}
}

// humanBytes renders a byte count with a binary unit.
func humanBytes(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%dB", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1fKB", float64(n)/1024)
	default:
		return fmt.Sprintf("%.1fMB", float64(n)/(1024*1024))
	}
}
