package egress

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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
