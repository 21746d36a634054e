// Package manager runs the manager binary against a real kube-apiserver as the ServiceAccount
// that config/ installs, with the generated RBAC, so a missing permission fails here rather
// than in a user's cluster.
package manager

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/dev/builder"
	"github.com/harness9/compaction-operator/internal/dev/proc"
	"github.com/harness9/compaction-operator/internal/dev/testenv"
	"github.com/harness9/compaction-operator/internal/dev/testenv/operator"
)

const (
	ns         = "default"
	waitFor    = 60 * time.Second
	pollPeriod = 200 * time.Millisecond
)

func TestManagerWithGeneratedRBAC(t *testing.T) {
	cl := operator.Install(t)
	m := testenv.StartMinIO(t)
	certDir := selfSignedCert(t)
	mgr := cl.StartManager(testenv.BuildManager(t), func(c *configv1alpha1.Configuration) {
		c.Controllers.StorageRetryInterval, c.Controllers.GCRetryMaxDelay = operator.Duration(time.Second), operator.Duration(2*time.Second)
		c.API.TLS.CertDir = certDir
	})
	metricsAddr := mgr.MetricsAddr
	c, ctx := cl.Client, context.Background()

	// A policy, a session and an annotated pod, as the samples have them.
	testenv.Must(t, c.Create(ctx, builder.MinIOSecret(ns, "minio-credentials", m.AccessKey, m.SecretKey)))
	policy := builder.Policy(ns, "default").Storage(builder.MinIOStorage(m.Endpoint, "agent-context", "", "minio-credentials")).Build()
	testenv.Must(t, c.Create(ctx, policy))
	session := builder.Session(ns, "swe-agent-1", policy.Name).Build()
	testenv.Must(t, c.Create(ctx, session))
	waitReady(t, mgr.Process, c, session)
	waitReady(t, mgr.Process, c, policy)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coding-agent", Annotations: map[string]string{"compaction.harness9.io/policy": policy.Name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "busybox"}}},
	}
	testenv.Must(t, c.Create(ctx, pod))
	podSession := &compactionv1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}}
	waitReady(t, mgr.Process, c, podSession)
	if owner := metav1.GetControllerOf(podSession); owner == nil || owner.UID != pod.UID {
		t.Errorf("pod session controller = %+v, want pod %s", owner, pod.UID)
	}

	// Deleting the session deletes its objects.
	store, err := s3.New(ctx, s3.Config{Endpoint: m.Endpoint, Bucket: "agent-context", Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey})
	testenv.Must(t, err)
	sid := session.Status.SessionID
	_, err = store.PutToolResult(ctx, sid, "call_1", "big output")
	testenv.Must(t, err)
	testenv.Must(t, store.AppendRecord(ctx, &compaction.CompactionRecord{ID: "r1", SessionID: sid, Timestamp: time.Now()}))
	testenv.Must(t, c.Delete(ctx, session))
	eventually(t, mgr.Process, "session deleted", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(session), session)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if _, err := store.GetToolResult(ctx, sid, "call_1"); err == nil {
		t.Errorf("tool result of the deleted session is still stored")
	}

	// The manager publishes the cert dir's ca.crt where agents read it: clients verify the
	// API and the metrics (served with the same certificate) with it.
	pool := x509.NewCertPool()
	eventually(t, mgr.Process, "the CA published", func() (bool, string) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: operator.SystemNamespace, Name: operator.CAConfigMap}, &cm); err != nil {
			return false, err.Error()
		}
		want, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
		testenv.Must(t, err)
		return cm.Data["ca.crt"] == string(want) && pool.AppendCertsFromPEM(want), fmt.Sprint(cm.Data)
	})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	t.Run("Metrics", func(t *testing.T) { testMetrics(t, c, cl, metricsAddr, hc) })
	t.Run("APIServesTLS", func(t *testing.T) {
		resp, err := hc.Post("https://"+mgr.APIAddr+"/v1/namespaces/default/sessions/swe-agent-1/compact", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("HTTPS request to the compaction API: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 ||
			resp.TLS.PeerCertificates[0].Subject.CommonName != "compaction-operator-api" {
			t.Errorf("status %d, TLS %v: want 401 over TLS with the given certificate", resp.StatusCode, resp.TLS != nil)
		}
	})

	// The manager ran as its ServiceAccount: any permission the generated RBAC lacks shows up
	// as a "forbidden" error in its log.
	if out := mgr.Output(); strings.Contains(out, "forbidden") {
		t.Errorf("the manager hit RBAC denials:\n%s", grepLines(out, "forbidden"))
	}
	if err := mgr.Stop(20 * time.Second); err != nil {
		t.Errorf("manager did not exit cleanly on SIGTERM: %v", err)
	}
}

// testMetrics scrapes /metrics over HTTPS as a ServiceAccount bound to the metrics-reader
// ClusterRole, and checks that an anonymous caller is refused.
func testMetrics(t *testing.T, c client.Client, cl *operator.Cluster, addr string, hc *http.Client) {
	ctx := context.Background()
	testenv.Must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prometheus"}}))
	testenv.Must(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: operator.MetricsReader},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "prometheus"}},
	}))
	token := cl.Token(ns, "prometheus")

	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		testenv.Must(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	var body string
	deadline := time.Now().Add(waitFor)
	for {
		code, b := get(token)
		if code == http.StatusOK {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics as the metrics reader: %d %s", code, b)
		}
		time.Sleep(pollPeriod)
	}
	if !strings.Contains(body, `controller_runtime_reconcile_total{controller="agentsession"`) {
		t.Errorf("metrics lack the agentsession controller's reconcile counter")
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %d, want 401", code)
	}
}

func waitReady(t *testing.T, mgr *proc.Process, c client.Client, obj client.Object) {
	t.Helper()
	eventually(t, mgr, obj.GetName()+" Ready", func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err.Error()
		}
		var conds []metav1.Condition
		switch o := obj.(type) {
		case *compactionv1alpha1.AgentSession:
			conds = o.Status.Conditions
		case *compactionv1alpha1.CompactionPolicy:
			conds = o.Status.Conditions
		}
		return meta.IsStatusConditionTrue(conds, compactionv1alpha1.ConditionReady), fmt.Sprintf("%+v", conds)
	})
}

func eventually(t *testing.T, mgr *proc.Process, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, waitFor, what, func() (bool, string) {
		if exited, err := mgr.Exited(); exited {
			t.Fatalf("manager exited (%v) while waiting for %s", err, what)
		}
		return cond()
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// selfSignedCert writes tls.crt and tls.key for 127.0.0.1 into a new directory.
func selfSignedCert(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testenv.Must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "compaction-operator-api"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	testenv.Must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	testenv.Must(t, err)
	dir := t.TempDir()
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	// As cert-manager's Secrets have it: the CA, here the certificate itself.
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return dir
}
