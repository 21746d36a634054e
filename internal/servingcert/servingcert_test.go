package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const ns = "compaction-system"

// clock is a settable test clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newManager(t *testing.T, c client.Client, clk *clock) *Manager {
	t.Helper()
	m, err := New(Config{
		Namespace: ns, SecretName: "api-cert", ConfigMapName: "api-ca",
		DNSNames:   DNSNames("compaction-operator-api", ns),
		CAValidity: 60 * time.Hour, CertValidity: 6 * time.Hour,
		Reader: c, Writer: c, Log: logr.Discard(), Now: clk.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bundle is the published CA bundle as a pool.
func bundle(t *testing.T, c client.Client) *x509.CertPool {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "api-ca"}, cm); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[CAKey])) {
		t.Fatalf("ConfigMap holds no CA: %q", cm.Data[CAKey])
	}
	return pool
}

// serving is the certificate m serves.
func serving(t *testing.T, m *Manager) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf
}

func verify(cert *x509.Certificate, pool *x509.CertPool, now time.Time) error {
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "compaction-operator-api." + ns + ".svc", CurrentTime: now})
	return err
}

func check(t *testing.T, m *Manager) {
	t.Helper()
	if _, err := m.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestIssuePublishAndShare(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a, b := newManager(t, c, clk), newManager(t, c, clk)
	if _, err := a.GetCertificate(&tls.ClientHelloInfo{}); err == nil {
		t.Fatal("a certificate before the first check")
	}
	next, err := a.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The next check is at the renewal point, 2/3 of the certificate's 6 hours at most.
	if !next.After(clk.t) || next.After(clk.t.Add(4*time.Hour)) {
		t.Errorf("next check at %s, want within 4h after %s", next, clk.t)
	}
	select {
	case <-a.Ready():
	default:
		t.Fatal("not ready after a successful check")
	}
	check(t, b)
	ca, cb := serving(t, a), serving(t, b)
	if !ca.Equal(cb) {
		t.Errorf("two replicas serve different certificates")
	}
	if err := verify(ca, bundle(t, c), clk.t); err != nil {
		t.Errorf("served certificate does not verify with the published bundle: %v", err)
	}
	if err := verify(ca, x509.NewCertPool(), clk.t); err == nil {
		t.Errorf("verifies without the CA")
	}
	// A check with nothing due changes nothing.
	secret := &corev1.Secret{}
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "api-cert"}, secret)
	rv := secret.ResourceVersion
	check(t, a)
	_ = c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "api-cert"}, secret)
	if secret.ResourceVersion != rv {
		t.Errorf("a check with nothing due rewrote the Secret")
	}
}

func TestRotation(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a, b := newManager(t, c, clk), newManager(t, c, clk)
	check(t, a)
	first := serving(t, a)
	firstCA := bundle(t, c)

	// Past 2/3 of the serving certificate's life: a new one from the same CA, which the
	// bundle clients already have verifies.
	clk.t = clk.t.Add(5 * time.Hour)
	check(t, a)
	second := serving(t, a)
	if second.Equal(first) {
		t.Fatal("serving certificate not renewed at 5/6 of its life")
	}
	if err := verify(second, firstCA, clk.t); err != nil {
		t.Errorf("renewed certificate does not verify with the old bundle: %v", err)
	}
	// The other replica picks it up on its next check.
	check(t, b)
	if !serving(t, b).Equal(second) {
		t.Errorf("the other replica did not pick up the renewed certificate")
	}

	// Past 2/3 of the CA's life: the next CA is published, certificates still come from the
	// current one.
	clk.t = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(41 * time.Hour)
	check(t, a)
	published := bundle(t, c)
	if err := verify(serving(t, a), firstCA, clk.t); err != nil {
		t.Errorf("certificate before the CA's promotion does not verify with the first bundle: %v", err)
	}
	// Past 5/6: the next CA signs; a client that read the bundle in between verifies it.
	clk.t = clk.t.Add(10 * time.Hour)
	check(t, a)
	promoted := serving(t, a)
	if err := verify(promoted, published, clk.t); err != nil {
		t.Errorf("certificate of the promoted CA does not verify with the bundle published before: %v", err)
	}
	if err := verify(promoted, firstCA, clk.t); err == nil {
		t.Errorf("certificate of the promoted CA verifies with the first CA alone: no CA rotation happened")
	}
	// The old CA stays trusted until it expires (a replica may still serve its certificate).
	if n := len(parseCerts([]byte(configMapCA(t, c)))); n != 2 {
		t.Errorf("bundle holds %d CAs after the promotion, want 2 (the old CA until it expires)", n)
	}
	clk.t = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(61 * time.Hour)
	check(t, a)
	if n := len(parseCerts([]byte(configMapCA(t, c)))); n != 1 {
		t.Errorf("bundle holds %d CAs after the old one expired, want 1", n)
	}
}

func configMapCA(t *testing.T, c client.Client) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "api-ca"}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data[CAKey]
}

// A replica whose write loses the race takes the winner's certificate.
func TestLostRace(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a, b := newManager(t, c, clk), newManager(t, c, clk)
	// b read nothing; a creates the Secret first; b's create fails with AlreadyExists.
	stale := &staleReader{Reader: c}
	b.cfg.Reader = stale
	check(t, a)
	next, err := b.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if next.After(clk.t) {
		t.Errorf("after a lost race the next check is at %s, want now", next)
	}
	b.cfg.Reader = c
	check(t, b)
	if !serving(t, a).Equal(serving(t, b)) {
		t.Errorf("replicas serve different certificates after a race")
	}
}

// staleReader finds no Secret, as a replica that read before another created it.
type staleReader struct{ client.Reader }

func (s *staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return s.Reader.Get(ctx, types.NamespacedName{Namespace: "nowhere", Name: key.Name}, obj, opts...)
	}
	return s.Reader.Get(ctx, key, obj, opts...)
}
