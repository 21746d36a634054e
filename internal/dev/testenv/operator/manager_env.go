package operator

import (
	"os"
	"strings"

	configv1alpha1 "github.com/harness9/compaction-operator/api/config/v1alpha1"
)

// StartManagerEnv is StartManager with env ("NAME=value", e.g. the chart's GOMEMLIMIT) added
// to the manager's environment. The variables are set in the test's environment only while
// the manager starts (the process copies it then), so what the test starts afterwards does
// not get them; like t.Setenv, it cannot be used in parallel tests.
func (c *Cluster) StartManagerEnv(bin string, env []string, configure ...func(*configv1alpha1.Configuration)) *Manager {
	c.t.Helper()
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			c.t.Fatalf("StartManagerEnv: %q is not NAME=value", kv)
		}
		old, had := os.LookupEnv(name)
		c.t.Setenv(name, value) // refuses parallel tests; restores at the end in any case
		defer func() {
			if had {
				_ = os.Setenv(name, old)
			} else {
				_ = os.Unsetenv(name)
			}
		}()
	}
	return c.StartManager(bin, configure...)
}
