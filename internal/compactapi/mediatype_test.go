package compactapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestRequireJSON(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string // Content-Type header values; nil: no header
		ok     bool
	}{
		{"no header", nil, true},
		{"empty value", []string{""}, true},
		{"blank value", []string{"  "}, true},
		{"json", []string{"application/json"}, true},
		{"json utf-8", []string{"application/json; charset=utf-8"}, true},
		{"case and spacing", []string{"  Application/JSON ;CHARSET=\"UTF-8\" "}, true},
		{"other parameter", []string{"application/json; profile=x"}, true},
		{"text/plain", []string{"text/plain"}, false},
		{"fetch default", []string{"text/plain;charset=UTF-8"}, false},
		{"form", []string{"application/x-www-form-urlencoded"}, false},
		{"multipart", []string{"multipart/form-data; boundary=x"}, false},
		{"json suffix", []string{"application/vnd.api+json"}, false},
		{"json prefix", []string{"application/jsonx"}, false},
		{"wildcard", []string{"application/*"}, false},
		{"latin1", []string{"application/json; charset=iso-8859-1"}, false},
		{"utf-16", []string{"application/json; charset=utf-16"}, false},
		{"list", []string{"application/json, text/plain"}, false},
		{"malformed parameter", []string{"application/json; charset"}, false},
		{"no subtype", []string{"application"}, false},
		{"NUL", []string{"application/json\x00"}, false},
		{"two headers", []string{"application/json", "application/json"}, false},
		{"huge", []string{"text/" + strings.Repeat("x", 1<<16)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add("Content-Type", v)
			}
			err := requireJSON(h)
			if tc.ok {
				if err != nil {
					t.Fatalf("%q rejected: %v", tc.values, err)
				}
				return
			}
			var ae *apiError
			if !errors.As(err, &ae) || ae.code != http.StatusUnsupportedMediaType || ae.reason != ReasonMediaType {
				t.Fatalf("%q: %v, want a 415 %s", tc.values, err, ReasonMediaType)
			}
			if len(ae.msg) > 200 {
				t.Errorf("message of %d bytes echoes the header: %.80s...", len(ae.msg), ae.msg)
			}
		})
	}
}
