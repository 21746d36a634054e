// Package servingcert issues and rotates the compaction API's serving certificate when no
// certificate is given (no cert-manager, no Secret of the user's): a self-signed CA and a
// certificate for the API's Service names, kept in one Secret in the operator's namespace so
// every replica serves the same certificate, and the CA bundle published in a ConfigMap that
// agents read.
//
// It is not github.com/open-policy-agent/cert-controller's rotator because that caches every
// Secret of the namespace (where the cluster policies' credentials live too), needs the
// Secret created beforehand and mounted by the kubelet (a rotation reaches the pod only after
// the kubelet syncs the volume), and publishes no CA bundle for clients.
//
// Rotation never leaves a client with a stale bundle: the next CA is published in the bundle
// at 2/3 of the signing CA's life and signs certificates only from 5/6 on, and a CA stays in
// the bundle until it expires. The serving certificate is renewed at 2/3 of its life.
// Replicas coordinate through the Secret's resourceVersion: whoever loses a write re-reads.
package servingcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys of the Secret and the ConfigMap.
const (
	// CAKey holds the CA bundle: every CA a client should trust now, PEM.
	CAKey        = "ca.crt"
	signingCert  = "signing-ca.crt"
	signingKey   = "signing-ca.key"
	nextCert     = "next-ca.crt"
	nextKey      = "next-ca.key"
	leafCertKey  = corev1.TLSCertKey
	leafKeyKey   = corev1.TLSPrivateKeyKey
	caCommonName = "compaction-operator-api-ca"
	// pemCertificate is the PEM block type of a certificate.
	pemCertificate = "CERTIFICATE"
)

// Defaults of Config.
const (
	DefaultCAValidity    = 3 * 365 * 24 * time.Hour
	DefaultCertValidity  = 90 * 24 * time.Hour
	DefaultCheckInterval = 10 * time.Minute
	// minCheckInterval keeps a very short validity (tests) from spinning.
	minCheckInterval = time.Second
	// retryInterval is how soon a failed check is tried again.
	retryInterval = 5 * time.Second
)

// Config says where the certificate lives and what it is for.
type Config struct {
	// Namespace holds the Secret and the ConfigMap (the operator's).
	Namespace string
	// SecretName is the Secret with the CAs' keys and the serving certificate.
	SecretName string
	// ConfigMapName is the ConfigMap publishing the CA bundle (key ca.crt); every
	// ServiceAccount may read it.
	ConfigMapName string
	// DNSNames are the serving certificate's names; it also holds 127.0.0.1 and ::1.
	DNSNames []string
	// CAValidity and CertValidity are the lifetimes of a new CA and a new serving
	// certificate (which never outlives its CA).
	CAValidity, CertValidity time.Duration
	// CheckInterval is the longest time between two reads of the Secret: a replica picks up
	// another's rotation within it.
	CheckInterval time.Duration
	// Reader reads the Secret and the ConfigMap (uncached: the manager caches no Secret);
	// Writer writes them.
	Reader client.Reader
	Writer client.Writer
	Log    logr.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Manager keeps the serving certificate current. It is a manager.Runnable that runs on every
// replica.
type Manager struct {
	cfg   Config
	cert  atomic.Pointer[tls.Certificate]
	ready chan struct{}
	once  sync.Once
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Namespace == "" || cfg.SecretName == "" || cfg.ConfigMapName == "" || len(cfg.DNSNames) == 0 {
		return nil, errors.New("serving certificate: namespace, Secret name, ConfigMap name and DNS names are required")
	}
	if cfg.Reader == nil || cfg.Writer == nil {
		return nil, errors.New("serving certificate: a reader and a writer are required")
	}
	if cfg.CAValidity <= 0 {
		cfg.CAValidity = DefaultCAValidity
	}
	if cfg.CertValidity <= 0 {
		cfg.CertValidity = DefaultCertValidity
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{cfg: cfg, ready: make(chan struct{})}, nil
}

// NeedLeaderElection is false: every replica serves, so every replica needs the certificate.
func (m *Manager) NeedLeaderElection() bool { return false }

// Ready is closed once a certificate is loaded.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (m *Manager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := m.cert.Load()
	if c == nil {
		return nil, errors.New("no serving certificate yet")
	}
	return c, nil
}

// Start checks the Secret until ctx ends: at start, at each renewal point and at least every
// CheckInterval.
func (m *Manager) Start(ctx context.Context) error {
	for {
		next, err := m.Check(ctx)
		wait := time.Until(next)
		if err != nil {
			m.cfg.Log.Error(err, "serving certificate check failed; retrying", "secret", m.cfg.Namespace+"/"+m.cfg.SecretName)
			wait = retryInterval
		}
		wait = min(max(wait, minCheckInterval), m.cfg.CheckInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Check reads the Secret, issues or rotates what is due, writes it back, serves the result
// and publishes the bundle. It returns when the next check is due.
func (m *Manager) Check(ctx context.Context) (time.Time, error) {
	key := types.NamespacedName{Namespace: m.cfg.Namespace, Name: m.cfg.SecretName}
	secret := &corev1.Secret{}
	exists := true
	if err := m.cfg.Reader.Get(ctx, key, secret); apierrors.IsNotFound(err) {
		exists = false
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Type:       corev1.SecretTypeTLS,
		}
	} else if err != nil {
		return time.Time{}, fmt.Errorf("read Secret %s: %w", key, err)
	}
	st := parseState(secret.Data)
	now := m.cfg.Now()
	changed, err := st.plan(now, m.cfg)
	if err != nil {
		return time.Time{}, err
	}
	if changed {
		secret.Data = st.data()
		secret.Type = corev1.SecretTypeTLS
		if !exists {
			err = m.cfg.Writer.Create(ctx, secret)
		} else {
			err = m.cfg.Writer.Update(ctx, secret)
		}
		// Another replica wrote first: take what it wrote on the next check, soon.
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return now, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("write Secret %s: %w", key, err)
		}
		m.cfg.Log.Info("serving certificate issued", "secret", key.String(), "notAfter", st.leaf.NotAfter,
			"ca", st.signing.cert.SerialNumber.String())
	}
	pair, err := tls.X509KeyPair(st.leafPEM, st.leafKeyPEM)
	if err != nil {
		return time.Time{}, fmt.Errorf("load serving certificate: %w", err)
	}
	// Published before it is served: a replica is Ready only once clients can find the CA.
	if err := m.publish(ctx, st.bundle); err != nil {
		return time.Time{}, err
	}
	m.cert.Store(&pair)
	m.once.Do(func() { close(m.ready) })
	return st.nextCheck(m.cfg), nil
}

// publish writes the CA bundle into the ConfigMap when it differs.
func (m *Manager) publish(ctx context.Context, bundle []byte) error {
	return PublishCA(ctx, m.cfg.Reader, m.cfg.Writer, types.NamespacedName{Namespace: m.cfg.Namespace, Name: m.cfg.ConfigMapName}, bundle)
}

// PublishCA makes the ConfigMap key's ca.crt hold bundle.
func PublishCA(ctx context.Context, r client.Reader, w client.Writer, key types.NamespacedName, bundle []byte) error {
	cm := &corev1.ConfigMap{}
	err := r.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{CAKey: string(bundle)}}
		if err := w.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create ConfigMap %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read ConfigMap %s: %w", key, err)
	case cm.Data[CAKey] == string(bundle):
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[CAKey] = string(bundle)
	if err := w.Update(ctx, cm); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update ConfigMap %s: %w", key, err)
	}
	return nil
}

// keyPair is a parsed certificate with its key and PEM.
type keyPair struct {
	cert            *x509.Certificate
	key             crypto.Signer
	certPEM, keyPEM []byte
}

// state is what the Secret holds.
type state struct {
	signing, next       *keyPair
	trusted             []*x509.Certificate // the bundle's CAs
	leaf                *x509.Certificate
	leafPEM, leafKeyPEM []byte
	bundle              []byte
}

func parseState(data map[string][]byte) *state {
	st := &state{
		signing:    parseKeyPair(data[signingCert], data[signingKey]),
		next:       parseKeyPair(data[nextCert], data[nextKey]),
		trusted:    parseCerts(data[CAKey]),
		leafPEM:    data[leafCertKey],
		leafKeyPEM: data[leafKeyKey],
		bundle:     data[CAKey],
	}
	if certs := parseCerts(st.leafPEM); len(certs) > 0 {
		if _, err := tls.X509KeyPair(st.leafPEM, st.leafKeyPEM); err == nil {
			st.leaf = certs[0]
		}
	}
	return st
}

func (st *state) data() map[string][]byte {
	d := map[string][]byte{
		CAKey:       st.bundle,
		signingCert: st.signing.certPEM,
		signingKey:  st.signing.keyPEM,
		leafCertKey: st.leafPEM,
		leafKeyKey:  st.leafKeyPEM,
	}
	if st.next != nil {
		d[nextCert], d[nextKey] = st.next.certPEM, st.next.keyPEM
	}
	return d
}

// at is the point at fraction num/den of c's life.
func at(c *x509.Certificate, num, den int64) time.Time {
	return c.NotBefore.Add(time.Duration(int64(c.NotAfter.Sub(c.NotBefore)) / den * num))
}

// plan brings st up to date at now: a CA when there is none or it expired, the next CA at
// 2/3 of the signing CA's life, its promotion at 5/6, a serving certificate when there is
// none, it is not the signing CA's, its names changed or it passed 2/3 of its life. It
// reports whether anything changed.
func (st *state) plan(now time.Time, cfg Config) (bool, error) {
	changed := false
	if st.signing == nil || !now.Before(st.signing.cert.NotAfter) || !st.signing.cert.IsCA {
		ca, err := newCA(now, cfg.CAValidity)
		if err != nil {
			return false, err
		}
		st.signing, st.next, changed = ca, nil, true
	} else if !now.Before(at(st.signing.cert, 5, 6)) {
		if st.next == nil || !now.Before(st.next.cert.NotAfter) {
			ca, err := newCA(now, cfg.CAValidity)
			if err != nil {
				return false, err
			}
			st.next = ca
		}
		st.signing, st.next, changed = st.next, nil, true
	}
	if st.next == nil && !now.Before(at(st.signing.cert, 2, 3)) {
		ca, err := newCA(now, cfg.CAValidity)
		if err != nil {
			return false, err
		}
		st.next, changed = ca, true
	}
	if st.leaf == nil || st.leaf.CheckSignatureFrom(st.signing.cert) != nil || !now.Before(at(st.leaf, 2, 3)) ||
		!slices.Equal(st.leaf.DNSNames, cfg.DNSNames) {
		if err := st.issueLeaf(now, cfg); err != nil {
			return false, err
		}
		changed = true
	}
	// The bundle: the signing CA, the next one and every earlier CA that has not expired
	// (a replica may still serve a certificate it signed until its next check).
	cas := []*x509.Certificate{st.signing.cert}
	if st.next != nil {
		cas = append(cas, st.next.cert)
	}
	for _, c := range st.trusted {
		if c.IsCA && now.Before(c.NotAfter) && !slices.ContainsFunc(cas, func(o *x509.Certificate) bool { return o.Equal(c) }) {
			cas = append(cas, c)
		}
	}
	var bundle bytes.Buffer
	for _, c := range cas {
		_ = pem.Encode(&bundle, &pem.Block{Type: pemCertificate, Bytes: c.Raw})
	}
	if !bytes.Equal(bundle.Bytes(), st.bundle) {
		st.bundle, changed = bundle.Bytes(), true
	}
	st.trusted = cas
	return changed, nil
}

// nextCheck is the earliest renewal point ahead.
func (st *state) nextCheck(cfg Config) time.Time {
	now := cfg.Now()
	next := now.Add(cfg.CheckInterval)
	points := []time.Time{at(st.leaf, 2, 3), at(st.signing.cert, 5, 6)}
	if st.next == nil {
		points = append(points, at(st.signing.cert, 2, 3))
	}
	for _, c := range st.trusted {
		points = append(points, c.NotAfter)
	}
	for _, p := range points {
		if !p.After(now) {
			return now // due already (a write lost to another replica's)
		}
		if p.Before(next) {
			next = p
		}
	}
	return next
}

func (st *state) issueLeaf(now time.Time, cfg Config) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate serving key: %w", err)
	}
	notAfter := now.Add(cfg.CertValidity)
	if notAfter.After(st.signing.cert.NotAfter) {
		notAfter = st.signing.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cfg.DNSNames[0]},
		DNSNames:     cfg.DNSNames,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-backdate(cfg.CertValidity)),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, st.signing.cert, &key.PublicKey, st.signing.key)
	if err != nil {
		return fmt.Errorf("sign serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("parse serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode serving key: %w", err)
	}
	st.leaf = leaf
	st.leafPEM = pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
	st.leafKeyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	return nil
}

// backdate is how far before its issue a certificate is valid, for clients whose clock is
// slightly behind: a minute, or a tenth of a short validity (so renewal points stay ahead).
func backdate(validity time.Duration) time.Duration { return min(time.Minute, validity/10) }

func newCA(now time.Time, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: caCommonName, SerialNumber: fmt.Sprint(now.Unix())},
		NotBefore:             now.Add(-backdate(validity)),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode CA key: %w", err)
	}
	kp := parseKeyPair(pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if kp == nil {
		return nil, errors.New("generated CA does not parse")
	}
	return kp, nil
}

// parseKeyPair is nil unless certPEM and keyPEM hold a matching certificate and key.
func parseKeyPair(certPEM, keyPEM []byte) *keyPair {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || pair.Leaf == nil {
		return nil
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil
	}
	return &keyPair{cert: pair.Leaf, key: signer, certPEM: certPEM, keyPEM: keyPEM}
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && b.Type == pemCertificate {
			out = append(out, c)
		}
	}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(fmt.Sprintf("serial number: %v", err))
	}
	return n
}

// DNSNames are the names of Service name in namespace, short to fully qualified.
func DNSNames(service, namespace string) []string {
	return []string{service, service + "." + namespace, service + "." + namespace + ".svc", service + "." + namespace + ".svc.cluster.local"}
}
