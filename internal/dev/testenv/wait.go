package testenv

import (
	"testing"
	"time"
)

// Poll is how often Eventually looks again.
const Poll = 100 * time.Millisecond

// Eventually calls cond every Poll until it reports true, and fails the test with what and
// cond's last detail when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
		}
		time.Sleep(Poll)
	}
}

// Must fails the test at once on a non-nil err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
