//go:build !linux

package proc

import "os/exec"

// setProcAttrs has no portable parent-death signal outside Linux; t.Cleanup stops the
// server on every normal exit.
func setProcAttrs(cmd *exec.Cmd) {}
