package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/compactclient"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

// Service names the self-signed certificate is for (config/default's).
const (
	apiServerName     = "compaction-operator-api." + operator.SystemNamespace + ".svc"
	metricsServerName = "compaction-operator-controller-manager-metrics-service." + operator.SystemNamespace + ".svc"
)

// TestAPITLS: a manager started without any certificate flag serves the compaction API over
// HTTPS with a CA it issued, published where an agent reads it with its own token; a client
// with that CA works, one without it fails verification, plain HTTP gets no answer of the
// API; the certificate is rotated without a restart; a second replica serves a certificate of
// the same CA; the metrics endpoint is verifiable with it too (the ServiceMonitor's way).
func TestAPITLS(t *testing.T) {
	cl := operator.Install(t)
	bin := testenv.BuildManager(t)
	// A short certificate lifetime so the test sees a renewal (at 2/3 of it).
	validity := func(c *configv1alpha1.Configuration) { c.API.TLS.CertValidity = operator.Duration(9 * time.Second) }
	mgr := cl.StartManager(bin, validity)
	ctx := context.Background()
	agentToken := cl.BindAgent(ns, "agent")

	// The agent reads the CA bundle with its own ServiceAccount's token (one for the
	// Kubernetes API); it cannot read the Secret with the CA's key.
	agentCfg, err := clientcmd.BuildConfigFromFlags("", cl.TokenKubeconfig(cl.Token(ns, "agent")))
	testenv.Must(t, err)
	agentKube, err := kubernetes.NewForConfig(agentCfg)
	testenv.Must(t, err)
	cm, err := agentKube.CoreV1().ConfigMaps(operator.SystemNamespace).Get(ctx, operator.CAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent reads the CA bundle with its own token: %v", err)
	}
	caFile := operator.WriteFile(t, "agent-ca.crt", []byte(cm.Data["ca.crt"]))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
		t.Fatalf("the published ConfigMap holds no CA: %v", cm.Data)
	}
	if _, err := agentKube.CoreV1().Secrets(operator.SystemNamespace).Get(ctx, "compaction-operator-api-cert", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent reading the certificate Secret: %v, want forbidden", err)
	}

	// With the published CA: the API answers (404: no such session, after authentication).
	agent, err := compactclient.New(mgr.URL, compactclient.WithToken(agentToken), compactclient.WithCAFile(caFile))
	testenv.Must(t, err)
	var ae *compactclient.APIError
	if err := agent.Records(ctx, ns, "no-such-session", io.Discard); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("records over HTTPS with the published CA: %v, want the API's 404", err)
	}
	// Without it: the certificate does not verify, and the error says what to do.
	noCA, err := compactclient.New(mgr.URL, compactclient.WithToken(agentToken))
	testenv.Must(t, err)
	err = noCA.Records(ctx, ns, "no-such-session", io.Discard)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "--ca-file") {
		t.Errorf("records without the CA: %v, want an unknown authority error naming --ca-file", err)
	}
	// compactctl verifies as well: refused without --ca-file, served with it.
	ctl := testenv.Build(t, "./cmd/compactctl")
	out, err := exec.Command(ctl, "records", "--server", mgr.URL, "--token", agentToken, ns+"/no-such-session").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--ca-file") {
		t.Errorf("compactctl without --ca-file: %v\n%s", err, out)
	}
	out, err = exec.Command(ctl, "records", "--server", mgr.URL, "--ca-file", caFile, "--token", agentToken, ns+"/no-such-session").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "404") {
		t.Errorf("compactctl with --ca-file: %v, want the API's 404\n%s", err, out)
	}

	// Plain HTTP gets no answer of the API, and TLS below 1.2 no handshake.
	req, err := http.NewRequest(http.MethodGet, "http://"+mgr.APIAddr+"/v1/namespaces/"+ns+"/sessions/no-such-session/records", nil)
	testenv.Must(t, err)
	req.Header.Set("Authorization", "Bearer "+agentToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || bytes.Contains(body, []byte(`"reason"`)) {
			t.Errorf("plain HTTP: %d %s, want net/http's 400 for HTTP on an HTTPS port", resp.StatusCode, body)
		}
	}
	if conn, err := tls.Dial("tcp", mgr.APIAddr, &tls.Config{RootCAs: pool, ServerName: apiServerName, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // checks that TLS 1.1 is refused
		_ = conn.Close()
		t.Errorf("a TLS 1.1 handshake succeeded")
	}

	// The metrics endpoint serves a certificate of the same CA for its Service name, so a
	// scraper verifies it with the bundle (serverName + CA, no insecureSkipVerify).
	if _, err := leaf(mgr.MetricsAddr, metricsServerName, pool); err != nil {
		t.Errorf("metrics endpoint with the published CA and the metrics Service name: %v", err)
	}

	// A second replica serves the same certificate: the first one's CA verifies it.
	first, err := leaf(mgr.APIAddr, apiServerName, pool)
	testenv.Must(t, err)
	second := cl.StartManager(bin, validity)
	t.Cleanup(func() { _ = second.Stop(20 * time.Second) })
	if _, err := leaf(second.APIAddr, apiServerName, pool); err != nil {
		t.Errorf("second replica with the first one's CA: %v", err)
	}

	// Rotation: within the certificate's life a new one is served, by the same process,
	// verifiable with the bundle the agent read at the start.
	testenv.Eventually(t, waitFor, "a renewed certificate", func() (bool, string) {
		c, err := leaf(mgr.APIAddr, apiServerName, pool)
		if err != nil {
			return false, err.Error()
		}
		return c.SerialNumber.Cmp(first.SerialNumber) != 0, "serial " + c.SerialNumber.String()
	})
	if exited, err := mgr.Exited(); exited {
		t.Fatalf("the manager exited during the rotation: %v", err)
	}
	agent, err = compactclient.New(mgr.URL, compactclient.WithToken(agentToken), compactclient.WithCAFile(caFile))
	testenv.Must(t, err)
	if err := agent.Records(ctx, ns, "no-such-session", io.Discard); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("records after the rotation: %v, want the API's 404", err)
	}

	// Plain HTTP only when asked for, with a warning in the log.
	plain := cl.StartManager(bin, func(c *configv1alpha1.Configuration) { c.API.TLS.InsecureServeHTTP = true })
	t.Cleanup(func() { _ = plain.Stop(20 * time.Second) })
	if !strings.HasPrefix(plain.URL, "http://") {
		t.Fatalf("URL %s", plain.URL)
	}
	if err := plain.APIClient(t, agentToken).Records(ctx, ns, "no-such-session", io.Discard); !errors.As(err, &ae) || ae.Code != http.StatusNotFound {
		t.Errorf("records over plain HTTP with api.tls.insecureServeHTTP: %v, want the API's 404", err)
	}
	if !strings.Contains(plain.Output(), "WARNING: serving the compaction API over plain HTTP") {
		t.Errorf("no warning about plain HTTP in the log")
	}

	// A replica that cannot get its certificate (it may not write Secrets where it is told
	// to keep it) is alive but not Ready, and does not listen on the API port.
	testNotReadyWithoutCertificate(t, cl, bin)
}

func testNotReadyWithoutCertificate(t *testing.T, cl *operator.Cluster, bin string) {
	ports := testenv.FreePorts(t, 3)
	p := testenv.StartProcess(t, bin, []string{
		"--kubeconfig", cl.TokenKubeconfig(cl.Token(operator.SystemNamespace, operator.ManagerSA)),
		"--metrics-bind-address", ports[0], "--health-probe-bind-address", ports[1], "--api-bind-address", ports[2],
		// Its Role lets it write the certificate's Secret only in its own namespace.
		"--config", operator.WriteFile(t, "config.yaml", []byte("apiVersion: config.compaction.harness9.io/v1alpha1\nkind: Configuration\n"+
			"leaderElection: {leaderElect: true, resourceNamespace: "+operator.SystemNamespace+"}\napi: {tls: {namespace: kube-public}}\n")),
	}, "POD_NAMESPACE="+operator.SystemNamespace)
	t.Cleanup(func() { _ = p.Stop(20 * time.Second) })
	testenv.Eventually(t, waitFor, "the certificate check to fail", func() (bool, string) {
		if exited, err := p.Exited(); exited {
			t.Fatalf("manager exited: %v\n%s", err, p.Output())
		}
		return strings.Contains(p.Output(), "serving certificate check failed"), "no failure logged yet"
	})
	probe := func(path string) int {
		resp, err := http.Get("http://" + ports[1] + path)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	testenv.Eventually(t, waitFor, "healthz", func() (bool, string) { return probe("/healthz") == http.StatusOK, "" })
	if code := probe("/readyz"); code == http.StatusOK {
		t.Errorf("/readyz %d without a certificate, want a failure", code)
	}
	if conn, err := net.Dial("tcp", ports[2]); err == nil {
		_ = conn.Close()
		t.Errorf("the API port accepts connections without a certificate")
	}
}

// leaf is the certificate addr serves for serverName, verified with pool.
func leaf(addr, serverName string, pool *x509.CertPool) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// TestAPICARotation: the manager's CA is rotated without a restart, and never ahead of the
// clients: the first certificate of the new CA verifies with the bundle an agent read
// before that certificate was served (the next CA is published before it signs).
func TestAPICARotation(t *testing.T) {
	cl := operator.Install(t)
	mgr := cl.StartManager(testenv.BuildManager(t), func(c *configv1alpha1.Configuration) {
		c.API.TLS.CAValidity, c.API.TLS.CertValidity = operator.Duration(30*time.Second), operator.Duration(9*time.Second)
	})
	ctx := context.Background()
	bundle := func() (*x509.CertPool, error) {
		cm, err := cl.Clientset.CoreV1().ConfigMaps(operator.SystemNamespace).Get(ctx, operator.CAConfigMap, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
			return nil, errors.New("no CA in the ConfigMap")
		}
		return pool, nil
	}
	first, err := leaf(mgr.APIAddr, apiServerName, mgr.CAPool)
	testenv.Must(t, err)
	previous := mgr.CAPool
	testenv.Eventually(t, waitFor, "a certificate of a new CA", func() (bool, string) {
		// Served after the bundle in previous was read.
		conn, err := tls.Dial("tcp", mgr.APIAddr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // verified below against the earlier bundle
		if err != nil {
			return false, err.Error()
		}
		served := conn.ConnectionState().PeerCertificates[0]
		_ = conn.Close()
		if !bytes.Equal(served.AuthorityKeyId, first.AuthorityKeyId) || !bytes.Equal(served.RawIssuer, first.RawIssuer) {
			if _, err := served.Verify(x509.VerifyOptions{Roots: previous, DNSName: apiServerName}); err != nil {
				t.Fatalf("the first certificate of the new CA does not verify with the bundle read before it was served: %v", err)
			}
			t.Logf("rotated: first %s (AKI %x) %s..%s, now %s (AKI %x) %s..%s", first.Issuer, first.AuthorityKeyId, first.NotBefore, first.NotAfter,
				served.Issuer, served.AuthorityKeyId, served.NotBefore, served.NotAfter)
			return true, ""
		}
		pool, err := bundle()
		if err != nil {
			return false, err.Error()
		}
		previous = pool
		return false, "same CA"
	})
	if exited, err := mgr.Exited(); exited {
		t.Fatalf("the manager exited during the CA rotation: %v", err)
	}
}
