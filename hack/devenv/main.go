// Command devenv runs the operator locally for exploring with kubectl: kube-apiserver and
// etcd with the CRDs, MinIO, and the manager, until Ctrl-C. `make dev-cluster` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/harness9/compaction-operator/internal/dev/devenv"
)

func main() {
	dir := flag.String("dir", ".devenv", "directory for the kubeconfig, MinIO data, manager log and samples overlay")
	flag.Parse()
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "devenv:", err)
		os.Exit(1)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "devenv:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e, err := devenv.Start(ctx, devenv.Options{Root: root, Dir: abs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "devenv:", err)
		os.Exit(1)
	}
	defer e.Stop()
	rel, _ := filepath.Rel(root, e.Samples)
	fmt.Printf(`Local compaction-operator is running (Ctrl-C stops everything).

  export KUBECONFIG=%s
  bin/kubectl apply -k %s        # config/samples, storage pointed at the local MinIO
  bin/kubectl get compactionpolicies,clustercompactionpolicies,agentsessions
  bin/kubectl describe agentsession swe-agent-1
  bin/kubectl explain compactionpolicy.spec.thresholds

Compaction API: %s   agent token: %s   CA bundle: %s
  bin/compactctl records --server %s --ca-file %s --token-file %s default/swe-agent-1
MinIO (S3):     http://%s  (access key %s, secret key %s)
Manager log:    %s
`, e.Kubeconfig, rel, e.APIURL, e.AgentTokenFile, e.CAFile, e.APIURL, e.CAFile, e.AgentTokenFile, e.MinIO.Endpoint, devenv.MinIOAccessKey, devenv.MinIOSecretKey, e.ManagerLog)

	select {
	case <-ctx.Done():
		fmt.Println("\nstopping...")
	case <-e.Manager().Done():
		_, err := e.Manager().Exited()
		fmt.Fprintf(os.Stderr, "devenv: the manager exited (%v); see %s\n", err, e.ManagerLog)
	}
}
