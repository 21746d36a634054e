// Package egress restricts the addresses the operator connects to for a policy (S3 endpoints,
// summarizer base URLs): the manager's egress.allowedEndpoints.
//
// An entry is one of:
//   - a host name, "minio.storage.svc": that name, any port;
//   - a wildcard, "*.amazonaws.com": any name ending in ".amazonaws.com" (not the bare
//     domain), any port;
//   - either with a port, "minio.storage.svc:9000", "*.amazonaws.com:443": that port only;
//   - an IP address, "10.0.0.5", "10.0.0.5:9000", "[fd00::1]:9000";
//   - a CIDR, "10.20.0.0/16" (any port).
//
// A name entry trusts whatever the name resolves to. Any other host (an IP address, or a name
// no name entry matches) is allowed only when every address the connection is made to is in
// an IP or CIDR entry: the check is made when dialling, on the resolved address, so a name
// that resolves somewhere else (DNS rebinding, a wildcard DNS service) gets no further.
// An empty list allows everything. None allows nothing, and And narrows one list by
// another: namespaced policies get egress.namespacedPolicyEndpoints and egress.allowedEndpoints.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNotAllowed is returned (wrapped) for an endpoint or address outside the list.
var ErrNotAllowed = errors.New("endpoint not allowed")

// Allowlist is a parsed egress.allowedEndpoints. A nil *Allowlist allows everything.
type Allowlist struct {
	names    []nameEntry
	prefixes []prefixEntry
	raw      []string
	flag     string     // where the list comes from, for messages
	and      *Allowlist // a further list that must allow it too (And)
}

type nameEntry struct {
	name     string // lower case; for a wildcard the suffix with its leading dot
	wildcard bool
	port     string // "" for any
}

type prefixEntry struct {
	prefix netip.Prefix
	port   string
}

// Parse parses the entries (see the package doc); empty entries are skipped. No entries give
// a nil Allowlist, which allows everything.
func Parse(entries []string) (*Allowlist, error) {
	return ParseFlag("egress.allowedEndpoints", entries)
}

// ParseFlag is Parse for the list of the named flag, which messages name.
func ParseFlag(flag string, entries []string) (*Allowlist, error) {
	a := &Allowlist{flag: flag}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if err := a.add(e); err != nil {
			return nil, fmt.Errorf("%s entry %q: %w", flag, e, err)
		}
		a.raw = append(a.raw, e)
	}
	if len(a.raw) == 0 {
		return nil, nil
	}
	return a, nil
}

// None is a list that allows nothing; flag names where it comes from in messages.
func None(flag string) *Allowlist { return &Allowlist{flag: flag} }

// And is the list that allows what both a and b allow (nil allowing everything).
func (a *Allowlist) And(b *Allowlist) *Allowlist {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	c := *a
	c.and = c.and.And(b)
	return &c
}

func (a *Allowlist) add(e string) error {
	if strings.Contains(e, "://") {
		return errors.New("give the host (host, host:port, *.domain), not a URL")
	}
	if strings.Contains(e, "/") {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return err
		}
		a.prefixes = append(a.prefixes, prefixEntry{prefix: p.Masked()})
		return nil
	}
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		if n, perr := strconv.Atoi(p); perr != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not a number from 1 to 65535", p)
		}
		host, port = h, p
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		a.prefixes = append(a.prefixes, prefixEntry{prefix: netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()), port: port})
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	wildcard := strings.HasPrefix(host, "*.")
	name := strings.TrimPrefix(host, "*")
	check := strings.TrimPrefix(name, ".")
	if check == "" || strings.ContainsAny(check, "*:[] ") {
		return errors.New("want a host name, *.domain, host:port, an IP address or a CIDR")
	}
	a.names = append(a.names, nameEntry{name: name, wildcard: wildcard, port: port})
	return nil
}

// String is the list as given.
func (a *Allowlist) String() string {
	if a == nil {
		return "(everything)"
	}
	s := strings.Join(a.raw, ",")
	if s == "" {
		s = "(nothing)"
	}
	if a.and != nil {
		s += "; and " + a.and.flag + " " + a.and.String()
	}
	return s
}

// own is the list without what And added, for messages.
func (a *Allowlist) own() string {
	c := *a
	c.and = nil
	return c.String()
}

// nameAllowed reports whether a name entry allows host:port.
func (a *Allowlist) nameAllowed(host, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range a.names {
		if n.port != "" && n.port != port {
			continue
		}
		if (n.wildcard && strings.HasSuffix(host, n.name) && len(host) > len(n.name)) || (!n.wildcard && host == n.name) {
			return true
		}
	}
	return false
}

// addrAllowed reports whether an IP or CIDR entry allows ip:port.
func (a *Allowlist) addrAllowed(ip netip.Addr, port string) bool {
	ip = ip.Unmap()
	for _, p := range a.prefixes {
		if (p.port == "" || p.port == port) && p.prefix.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckHostPort returns an error wrapping ErrNotAllowed when no connection to host:port can
// be allowed. A name no name entry matches passes when there are IP or CIDR entries: whether
// its addresses are in them is checked when dialling.
func (a *Allowlist) CheckHostPort(host, port string) error {
	for l := a; l != nil; l = l.and {
		if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			if l.addrAllowed(ip, port) {
				continue
			}
		} else if l.nameAllowed(host, port) || len(l.prefixes) > 0 {
			continue
		}
		return fmt.Errorf("%w by the operator's %s: %s (allowed: %s)", ErrNotAllowed, l.flag, net.JoinHostPort(strings.Trim(host, "[]"), port), l.own())
	}
	return nil
}

// CheckS3 checks an S3 endpoint (host[:port], the port defaulting to 443, or 80 when insecure).
func (a *Allowlist) CheckS3(endpoint string, insecure bool) error {
	if a == nil {
		return nil
	}
	if strings.Contains(endpoint, "://") {
		return a.CheckURL(endpoint)
	}
	port := "443"
	if insecure {
		port = "80"
	}
	return a.CheckHostPort(splitDefault(endpoint, port))
}

// CheckURL checks a base URL (http or https, the port defaulting to the scheme's).
func (a *Allowlist) CheckURL(raw string) error {
	if a == nil {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w by the operator's %s: %q is not a URL with a host", ErrNotAllowed, a.flag, raw)
	}
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return a.CheckHostPort(u.Hostname(), port)
}

func splitDefault(hostport, port string) (string, string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return hostport, port
}

// DialContext wraps d's DialContext: a connection to a host a name entry allows is made as
// usual; any other is made only to addresses in an IP or CIDR entry, checked on the resolved
// address just before connecting. With And, every list is checked so. A nil Allowlist
// returns d.DialContext.
func (a *Allowlist) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if a == nil {
		return d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		_, ipErr := netip.ParseAddr(host)
		isName := err == nil && ipErr != nil
		// The lists that do not trust the name check the address it resolves to.
		var byAddr []*Allowlist
		for l := a; l != nil; l = l.and {
			if !isName || !l.nameAllowed(host, port) {
				byAddr = append(byAddr, l)
			}
		}
		if len(byAddr) == 0 {
			return d.DialContext(ctx, network, addr)
		}
		checked := *d
		checked.Control = func(network, address string, c syscall.RawConn) error {
			h, p, err := net.SplitHostPort(address)
			if err != nil {
				return fmt.Errorf("%w: %s", ErrNotAllowed, address)
			}
			ip, err := netip.ParseAddr(h)
			for _, l := range byAddr {
				if err != nil || !l.addrAllowed(ip, p) {
					return fmt.Errorf("%w by the operator's %s: address %s", ErrNotAllowed, l.flag, address)
				}
			}
			if d.Control != nil {
				return d.Control(network, address, c)
			}
			return nil
		}
		return checked.DialContext(ctx, network, addr)
	}
}

// Transport returns a clone of base (http.DefaultTransport's settings when nil) that dials
// through DialContext. Without a list it is base. With one, the environment's proxy is not
// used: the connection would go to the proxy, not to an address this list checks.
func (a *Allowlist) Transport(base *http.Transport) *http.Transport {
	if base == nil {
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	if a == nil {
		return base
	}
	t := base.Clone()
	t.Proxy = nil
	t.DialContext = a.DialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	return t
}
