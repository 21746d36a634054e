package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/harness9/compaction-operator/compaction/compactclient"
)

// clusterFlags say how to reach the operator's compaction API and who to be.
type clusterFlags struct {
	server     *string
	token      *string
	tokenFile  *string
	kubeconfig *string
	// fromKubeconfig is set when the token came from the kubeconfig, for explain.
	fromKubeconfig bool
	caFile         *string
	plainHTTP      *bool
	// conversation is the conversation of the session to read ("" its default one).
	conversation *string
}

func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	return &clusterFlags{
		server: fs.String("server", os.Getenv("COMPACTION_SERVER"),
			"base URL of the compaction API, e.g. https://localhost:8082 (default $COMPACTION_SERVER)"),
		caFile: fs.String("ca-file", os.Getenv("COMPACTION_CA_FILE"),
			"CA bundle (PEM) to verify the API's certificate with instead of the system's roots: the operator publishes it as key ca.crt of the ConfigMap "+
				"compaction-operator-api-ca in its namespace, e.g. kubectl get cm -n compaction-system compaction-operator-api-ca -o jsonpath='{.data.ca\\.crt}' > ca.crt (default $COMPACTION_CA_FILE)"),
		plainHTTP: fs.Bool("plain-http", false, "allow an http:// --server off the loopback (the token and the conversations then cross the network in clear text)"),
		token: fs.String("token", "", "bearer token for the compaction API's audience, e.g. $(kubectl create token SA --audience "+
			compactclient.DefaultTokenAudience+") (default: the current kubeconfig context's token)"),
		tokenFile: fs.String("token-file", "", "file holding the bearer token, e.g. a projected ServiceAccount token with audience "+compactclient.DefaultTokenAudience),
		kubeconfig: fs.String("kubeconfig", "",
			"kubeconfig whose current context's token is used when neither --token nor --token-file is set (default $KUBECONFIG, ~/.kube/config)"),
		conversation: fs.String("conversation", "",
			"conversation of the session (the API's conversation parameter, e.g. a proxy's sub-agent); empty: the session's default conversation"),
	}
}

// client builds the API client; the token comes from the flags or the kubeconfig.
func (f *clusterFlags) client() (*compactclient.Client, error) {
	if *f.server == "" {
		return nil, usageErrorf("--server (or $COMPACTION_SERVER) is required: the compaction API's URL, e.g. https://localhost:8082")
	}
	var opt compactclient.Option
	switch {
	case *f.token != "" && *f.tokenFile != "":
		return nil, usageErrorf("--token and --token-file are exclusive")
	case *f.token != "":
		opt = compactclient.WithToken(*f.token)
	case *f.tokenFile != "":
		opt = compactclient.WithTokenFile(*f.tokenFile)
	default:
		token, err := kubeconfigToken(*f.kubeconfig)
		if err != nil {
			return nil, err
		}
		opt, f.fromKubeconfig = compactclient.WithToken(token), true
	}
	opts := []compactclient.Option{opt}
	if *f.caFile != "" {
		opts = append(opts, compactclient.WithCAFile(*f.caFile))
	}
	if *f.plainHTTP {
		opts = append(opts, compactclient.WithPlainHTTP())
	}
	return compactclient.New(*f.server, opts...)
}

// explain adds what to do to a 401 for a token taken from the kubeconfig: that token is for
// the Kubernetes API's audience, which the compaction API refuses.
func (f *clusterFlags) explain(err error) error {
	var ae *compactclient.APIError
	if !f.fromKubeconfig || !errors.As(err, &ae) || ae.Code != http.StatusUnauthorized {
		return err
	}
	return fmt.Errorf("%w\nthe token came from the kubeconfig, which is usually for the Kubernetes API's audience; the compaction API "+
		"wants a token for its own (%q by default): pass --token \"$(kubectl create token SERVICE_ACCOUNT --audience %s)\" or --token-file",
		err, compactclient.DefaultTokenAudience, compactclient.DefaultTokenAudience)
}

// kubeconfigToken is the bearer token of the kubeconfig's current context.
func kubeconfigToken(path string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return "", fmt.Errorf("read kubeconfig: %w", err)
	}
	switch {
	case cfg.BearerToken != "":
		return cfg.BearerToken, nil
	case cfg.BearerTokenFile != "":
		data, err := os.ReadFile(cfg.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("read the kubeconfig's token file: %w", err)
		}
		return strings.TrimSpace(string(data)), nil
	}
	return "", fmt.Errorf("the kubeconfig's current context has no bearer token (client certificates cannot call the compaction API): pass --token or --token-file")
}

// sessionArgs checks that args are NAMESPACE/NAME followed by the arguments named in more,
// and splits the session.
func sessionArgs(args []string, more ...string) (ns, name string, err error) {
	if len(args) != 1+len(more) {
		if len(more) == 0 {
			return "", "", usageErrorf("want one NAMESPACE/NAME argument, got %d", len(args))
		}
		return "", "", usageErrorf("want NAMESPACE/NAME and %s, got %d arguments", strings.Join(more, " and "), len(args))
	}
	return sessionArg(args[0])
}

// sessionCall is what a command that calls the compaction API on one session needs: the
// client, the session, its conversation (--conversation) and the arguments after
// NAMESPACE/NAME.
type sessionCall struct {
	client   *compactclient.Client
	ns, name string
	conv     compactclient.CallOption
	more     []string
}

// sessionFlags is the flags function of a command whose only flags are the cluster flags and
// whose arguments are NAMESPACE/NAME followed by those named in more: it checks them and
// builds the client before run, and explains a kubeconfig token the API refused in run's
// error.
func sessionFlags(run func(ctx context.Context, std *stdio, s sessionCall) error, more ...string) func(*flag.FlagSet) func(context.Context, *stdio, []string) error {
	return func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
		cf := addClusterFlags(fs)
		return func(ctx context.Context, std *stdio, args []string) error {
			ns, name, err := sessionArgs(args, more...)
			if err != nil {
				return err
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			return cf.explain(run(ctx, std, sessionCall{c, ns, name, compactclient.InConversation(*cf.conversation), args[1:]}))
		}
	}
}

// sessionArg splits NAMESPACE/NAME.
func sessionArg(arg string) (string, string, error) {
	ns, name, ok := strings.Cut(arg, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", usageErrorf("session %q must be NAMESPACE/NAME", arg)
	}
	return ns, name, nil
}

func recordsCommand() *command {
	return &command{
		name:     "records",
		synopsis: "print an AgentSession's JSONL compaction records from the operator",
		usage:    "compactctl records [flags] NAMESPACE/NAME",
		help: `Streams the session's audit trail, one CompactionRecord per line, oldest first, from the
operator's compaction API (GET /v1/namespaces/NAMESPACE/sessions/NAME/records). The caller
needs "get" on agentsessions/records in the namespace (the compaction-agent ClusterRole).`,
		example: `  compactctl records --server https://localhost:8082 --ca-file ca.crt default/swe-agent-1 | jq -c '{tier, tokensBefore, tokensAfter}'
  compactctl records --server https://localhost:8082 --ca-file ca.crt --conversation sub-agent-2 default/swe-agent-1`,
		flags: sessionFlags(func(ctx context.Context, std *stdio, s sessionCall) error {
			return s.client.Records(ctx, s.ns, s.name, std.out, s.conv)
		}),
	}
}

func toolResultCommand() *command {
	return &command{
		name:     "tool-result",
		synopsis: "print an offloaded tool result of an AgentSession, byte for byte",
		usage:    "compactctl tool-result [flags] NAMESPACE/NAME TOOL_CALL_ID",
		help: `Prints the full original output of an offloaded tool result, as the agent reads it back
(GET /v1/namespaces/NAMESPACE/sessions/NAME/toolresults/TOOL_CALL_ID). The caller needs "get"
on agentsessions/toolresults in the namespace.`,
		example: `  compactctl tool-result --server https://localhost:8082 --ca-file ca.crt default/swe-agent-1 call_17 | less`,
		flags: sessionFlags(func(ctx context.Context, std *stdio, s sessionCall) error {
			data, err := s.client.GetToolResult(ctx, s.ns, s.name, s.more[0], s.conv)
			if err != nil {
				return err
			}
			if _, err := std.out.Write(data); err != nil {
				return fmt.Errorf("write tool result: %w", err)
			}
			return nil
		}, "TOOL_CALL_ID"),
	}
}
