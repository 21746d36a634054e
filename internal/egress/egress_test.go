package egress

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "host:0", "host:x", "*", "*.", "a*b.com", "http://x"} {
		if _, err := Parse([]string{bad}); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if a, err := Parse([]string{" ", ""}); err != nil || a != nil {
		t.Errorf("Parse of empty entries = %v, %v; want nil (everything)", a, err)
	}
}

func TestCheck(t *testing.T) {
	a, err := Parse([]string{"minio.storage.svc:9000", "*.amazonaws.com", "api.openai.com:443", "10.20.0.0/16", "192.0.2.7:8000", "[fd00::1]:9000"})
	if err != nil {
		t.Fatal(err)
	}
	allowed := []struct{ host, port string }{
		{"minio.storage.svc", "9000"}, {"MINIO.storage.svc.", "9000"}, {"s3.eu-west-1.amazonaws.com", "443"},
		{"bucket.s3.amazonaws.com", "80"}, {"api.openai.com", "443"}, {"10.20.3.4", "9000"}, {"192.0.2.7", "8000"},
		{"fd00::1", "9000"},
		// A name no name entry matches passes here: with CIDR entries, dialling decides.
		{"elsewhere.example", "443"},
	}
	for _, c := range allowed {
		if err := a.CheckHostPort(c.host, c.port); err != nil {
			t.Errorf("%s:%s: %v", c.host, c.port, err)
		}
	}
	refused := []struct{ host, port string }{
		{"10.21.0.1", "9000"}, {"192.0.2.7", "8001"}, {"169.254.169.254", "80"}, {"fd00::2", "9000"},
	}
	for _, c := range refused {
		if err := a.CheckHostPort(c.host, c.port); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%s:%s: %v, want ErrNotAllowed", c.host, c.port, err)
		}
	}
	names, _ := Parse([]string{"minio.storage.svc:9000", "*.amazonaws.com"})
	for _, c := range []struct{ host, port string }{{"minio.storage.svc", "9001"}, {"amazonaws.com", "443"}, {"evilamazonaws.com", "443"}, {"10.0.0.1", "443"}} {
		if err := names.CheckHostPort(c.host, c.port); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("names only, %s:%s: %v, want ErrNotAllowed", c.host, c.port, err)
		}
	}
	if err := names.CheckS3("minio.storage.svc:9000", true); err != nil {
		t.Errorf("CheckS3: %v", err)
	}
	if err := names.CheckS3("minio.storage.svc", true); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("CheckS3 on the default port 80: %v", err)
	}
	if err := names.CheckURL("https://bedrock.us-east-1.amazonaws.com/v1"); err != nil {
		t.Errorf("CheckURL: %v", err)
	}
	if err := names.CheckURL("http://169.254.169.254/latest/meta-data/"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("CheckURL of the metadata service: %v", err)
	}
	var none *Allowlist
	if err := none.CheckURL("http://169.254.169.254/"); err != nil {
		t.Errorf("nil list: %v", err)
	}
}

// TestDial: issue 14. An allowed name that resolves to an address outside the CIDR entries
// gets no connection: the check is on the resolved address (here "localhost", 127.0.0.1,
// stands for a name an attacker points at an internal address).
func TestDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	get := func(entries []string, host string) error {
		t.Helper()
		a, err := Parse(entries)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: a.Transport(nil)}
		resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	if err := get([]string{"10.0.0.0/8"}, "localhost"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("localhost with only 10.0.0.0/8 allowed: %v, want ErrNotAllowed", err)
	}
	if err := get([]string{"10.0.0.0/8"}, "127.0.0.1"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("127.0.0.1 with only 10.0.0.0/8 allowed: %v, want ErrNotAllowed", err)
	}
	if err := get([]string{"127.0.0.0/8", "::1/128"}, "localhost"); err != nil {
		t.Errorf("localhost with 127.0.0.0/8 allowed: %v", err)
	}
	if err := get([]string{"localhost:" + port}, "localhost"); err != nil {
		t.Errorf("localhost by name: %v", err)
	}
	if err := get([]string{"localhost:1"}, "localhost"); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("localhost on another port than allowed: %v, want ErrNotAllowed", err)
	}
	if err := get(nil, "127.0.0.1"); err != nil {
		t.Errorf("no list: %v", err)
	}
}

// TestNamespacedLists: issue 28, item 1. Namespaced policies get None unless a platform
// admin lists endpoints, and their list narrows --allowed-endpoints, never widens it: both
// the names checked up front and the addresses checked when dialling.
func TestNamespacedLists(t *testing.T) {
	const flag = "--namespaced-policy-endpoints"
	none := None(flag)
	for _, hp := range [][2]string{{"minio.storage.svc", "9000"}, {"127.0.0.1", "80"}, {"s3.amazonaws.com", "443"}} {
		err := none.CheckHostPort(hp[0], hp[1])
		if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), flag) || !strings.Contains(err.Error(), "(nothing)") {
			t.Errorf("None, %s:%s: %v, want ErrNotAllowed naming %s and (nothing)", hp[0], hp[1], err, flag)
		}
	}
	global, err := Parse([]string{"minio.storage.svc", "*.amazonaws.com", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ParseFlag(flag, []string{"minio.storage.svc:9000", "10.1.0.0/16", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	both := ns.And(global)
	for _, hp := range [][2]string{{"minio.storage.svc", "9000"}, {"10.1.2.3", "443"}} {
		if err := both.CheckHostPort(hp[0], hp[1]); err != nil {
			t.Errorf("both allow %s:%s: %v", hp[0], hp[1], err)
		}
	}
	for _, c := range []struct{ host, port, by string }{
		{"10.2.0.1", "443", flag},                              // in global's CIDR, not ns's
		{"192.0.2.1", "443", "egress.allowedEndpoints"},        // in ns's list, not global's
		{"s3.amazonaws.com", "443", "egress.allowedEndpoints"}, // ns has CIDRs (dial decides); global: name ok
	} {
		err := both.CheckHostPort(c.host, c.port)
		if c.host == "s3.amazonaws.com" {
			// Up front it passes (a CIDR entry may match what it resolves to); dialling checks.
			if err != nil {
				t.Errorf("%s:%s up front: %v", c.host, c.port, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), c.by) {
			t.Errorf("%s:%s: %v, want ErrNotAllowed by %s", c.host, c.port, err, c.by)
		}
	}
	names, _ := ParseFlag(flag, []string{"minio.storage.svc:9000"})
	if err := names.And(global).CheckHostPort("minio.storage.svc", "9001"); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), flag) {
		t.Errorf("another port than the namespaced list's: %v, want ErrNotAllowed by %s", err, flag)
	}
	if s := both.String(); !strings.Contains(s, "10.1.0.0/16") || !strings.Contains(s, "and egress.allowedEndpoints") {
		t.Errorf("String = %q", s)
	}
	if None(flag).And(nil).String() != "(nothing)" || (*Allowlist)(nil).And(nil) != nil {
		t.Error("And with nil changed the list")
	}

	// Dialling: localhost is trusted by name in the global list, but the namespaced list has
	// only a CIDR that 127.0.0.1 is not in, so the address check refuses it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dial := func(a *Allowlist) error {
		c := &http.Client{Transport: a.Transport(nil)}
		resp, err := c.Get("http://" + net.JoinHostPort("localhost", port) + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	g, _ := Parse([]string{"localhost"})
	n, _ := ParseFlag(flag, []string{"10.0.0.0/8"})
	if err := dial(n.And(g)); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("localhost with the namespaced list 10.0.0.0/8: %v, want ErrNotAllowed", err)
	}
	n, _ = ParseFlag(flag, []string{"127.0.0.0/8", "::1/128"})
	if err := dial(n.And(g)); err != nil {
		t.Errorf("localhost with both allowing it: %v", err)
	}
	if err := dial(None(flag).And(g)); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("localhost with None: %v, want ErrNotAllowed", err)
	}
}
