// Command golangci-lint is golangci-lint with kube-api-linter compiled in as a module plugin.
//
// This is what `golangci-lint custom` generates (golangci-lint's own main plus a blank import
// per plugin), written out because `custom` clones golangci-lint with git, and CI has only the
// Go module proxy. The versions of both are pinned in this directory's go.mod.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// kube-api-linter registers itself as the module plugin "kubeapilinter".
	_ "sigs.k8s.io/kube-api-linter"
)

func main() {
	info := commands.BuildInfo{Version: "unknown", Commit: "kube-api-linter plugin", Date: "(unknown)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info.GoVersion = bi.GoVersion
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/golangci/golangci-lint/v2" {
				info.Version = dep.Version
			}
		}
	}
	if err := commands.Execute(info); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}
