package servingcert

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Files serves the certificate of a directory (tls.crt, tls.key; a Secret issued by
// cert-manager or given by the user), reloaded when the files change. When the directory
// also holds ca.crt (cert-manager writes it) and Publish is set, the bundle is published in
// that ConfigMap, so agents find the CA in the same place in every mode. It is a
// manager.Runnable that runs on every replica.
type Files struct {
	*certwatcher.CertWatcher
	dir     string
	publish *types.NamespacedName
	r       client.Reader
	w       client.Writer
	log     logr.Logger
	ready   chan struct{}
}

// NewFiles loads dir's certificate; it fails when the files are missing or do not parse.
// publish, when not nil, is the ConfigMap to publish ca.crt in with r and w.
func NewFiles(dir string, publish *types.NamespacedName, r client.Reader, w client.Writer, log logr.Logger) (*Files, error) {
	cw, err := certwatcher.New(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("load the certificate of %s: %w", dir, err)
	}
	ready := make(chan struct{})
	close(ready) // certwatcher.New has loaded it
	return &Files{CertWatcher: cw, dir: dir, publish: publish, r: r, w: w, log: log, ready: ready}, nil
}

// NeedLeaderElection is false: every replica serves.
func (f *Files) NeedLeaderElection() bool { return false }

// Ready is closed: the certificate was loaded by NewFiles.
func (f *Files) Ready() <-chan struct{} { return f.ready }

// Start watches the files and publishes ca.crt until ctx ends.
func (f *Files) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- f.CertWatcher.Start(ctx) }()
	for {
		if f.publish != nil {
			if err := f.publishCA(ctx); err != nil {
				f.log.Error(err, "publishing the CA bundle failed; retrying")
			}
		}
		select {
		case err := <-errc:
			if err != nil {
				return fmt.Errorf("certificate watcher: %w", err)
			}
			return nil
		case <-time.After(time.Minute):
		}
	}
}

func (f *Files) publishCA(ctx context.Context) error {
	ca, err := os.ReadFile(filepath.Join(f.dir, CAKey))
	if os.IsNotExist(err) {
		return nil // a Secret without a CA: the clients know it some other way
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", CAKey, err)
	}
	if len(parseCerts(ca)) == 0 {
		return fmt.Errorf("%s holds no certificate", filepath.Join(f.dir, CAKey))
	}
	return PublishCA(ctx, f.r, f.w, *f.publish, ca)
}
