package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse([]string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "-listen", "-upstream", "-anthropic-upstream", "-server", "-session",
		"-token-file", "-ca-file", "-metrics-listen", "-prompt-cache-key", "-compact-timeout", "-max-body-bytes", "fail", "uncompacted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, out.String())
		}
	}
}

func TestParseRefusesIncompleteCommandLines(t *testing.T) {
	t.Setenv("COMPACTION_SERVER", "")
	t.Setenv("COMPACTION_SESSION", "")
	for _, args := range [][]string{
		{},
		{"--server", "https://api:8443"},
		{"--session", "ns/name"},
		{"--server", "https://api:8443", "--session", "ns/name", "extra"},
	} {
		if _, err := parse(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parse(%q) accepted", args)
		}
	}
	o, err := parse([]string{"--server", "https://api:8443", "--session", "ns/name"}, &bytes.Buffer{})
	if err != nil || o.listen != "127.0.0.1:4141" || !o.promptCacheKey {
		t.Fatalf("defaults: %+v, %v; want loopback and the prompt cache key on", o, err)
	}
}

func TestRunRefusesBadSessionsAndURLs(t *testing.T) {
	for _, o := range []*options{
		{server: "https://api:8443", session: "no-namespace", upstream: "https://up/v1", anthropicUpstream: "https://up/v1", listen: "127.0.0.1:0"},
		{server: "https://api:8443", session: "ns/a/b", upstream: "https://up/v1", anthropicUpstream: "https://up/v1", listen: "127.0.0.1:0"},
		{server: "https://api:8443", session: "ns/name", upstream: "ftp://up", anthropicUpstream: "https://up/v1", listen: "127.0.0.1:0"},
		{server: "not a url", session: "ns/name", upstream: "https://up/v1", anthropicUpstream: "https://up/v1", listen: "127.0.0.1:0"},
	} {
		if err := run(context.Background(), o, logr.Discard(), nil); err == nil {
			t.Errorf("run(%+v) accepted", o)
		}
	}
}

func TestHelpDocumentsToolResults(t *testing.T) {
	var out bytes.Buffer
	_, _ = parse([]string{"--help"}, &out)
	for _, want := range []string{"-offload-hook", "-read-back-url", "/compaction/v1/toolresults/", "hookThresholdChars"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
	o, err := parse([]string{"--server", "https://api:8443", "--session", "ns/name"}, &bytes.Buffer{})
	if err != nil || !o.offloadHook || o.readBackURL != "" {
		t.Fatalf("defaults: %+v, %v; want the hook on and the read-back URL from the listener", o, err)
	}
}

func TestLocalURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:4141": "http://127.0.0.1:4141",
		"0.0.0.0:4141":   "http://127.0.0.1:4141",
		"[::]:4141":      "http://[::1]:4141",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := localURL(a); got != want {
			t.Errorf("localURL(%s) = %s, want %s", addr, got, want)
		}
	}
}
