package proc

import (
	"os/exec"
	"syscall"
)

// setProcAttrs asks the kernel to kill the server if the test binary dies without running
// its cleanups (a -timeout panic, SIGKILL), so a crashed test run leaks no servers.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
