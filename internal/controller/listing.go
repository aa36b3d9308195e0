package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/compliance"
	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// A lock key watch lists every key under its prefix at each change there,
// so the listing is what a change costs once the decisions are
// incremental: at 10,000 keys the answer is about 2 MB of JSON. The watch
// therefore reads it the cheapest way Consul allows: uncompressed (the
// agent is a loopback or LAN hop away; gzip cost the agent and the
// controller more than the bytes it saved), and decoded by a small
// parser of the one shape Consul answers with rather than by reflection.

// listMeta is what a lock key watch needs of an answer's headers.
type listMeta struct {
	lastIndex uint64
	filtered  bool // X-Consul-Results-Filtered-By-ACLs
}

// listKeys is GET /v1/kv/<prefix>?recurse as a blocking query after index,
// through the watch client (its token, TLS, headers, datacenter, namespace
// and partition), keeping the entries keep selects. An empty prefix (404)
// is an empty listing; other statuses are api.StatusError, as the api
// reports them.
func listKeys(ctx context.Context, cl *consul.Client, prefix string, index uint64, wait time.Duration, keep func(string) bool) (map[string]compliance.LiveKey, listMeta, error) {
	params := url.Values{"recurse": {""}}
	if cl.Datacenter != "" {
		params.Set("dc", cl.Datacenter)
	}
	if cl.Namespace != "" {
		params.Set("ns", cl.Namespace)
	}
	if cl.Partition != "" {
		params.Set("partition", cl.Partition)
	}
	if index != 0 {
		params.Set("index", strconv.FormatUint(index, 10))
		params.Set("wait", fmt.Sprintf("%dms", max(wait/time.Millisecond, 1)))
	}
	u := url.URL{Scheme: cl.Scheme, Host: cl.Address, Path: "/v1/kv/" + strings.TrimPrefix(prefix, "/"), RawQuery: params.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, listMeta{}, err
	}
	for k, vs := range cl.Headers() {
		req.Header[k] = vs
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := cl.HTTPClient().Do(req)
	if err != nil {
		return nil, listMeta{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, listMeta{}, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return nil, listMeta{}, api.StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	var meta listMeta
	if v := resp.Header.Get("X-Consul-Index"); v != "" {
		if meta.lastIndex, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, listMeta{}, fmt.Errorf("X-Consul-Index %q: %w", v, err)
		}
	}
	meta.filtered = resp.Header.Get("X-Consul-Results-Filtered-By-ACLs") == "true"
	live := map[string]compliance.LiveKey{}
	if resp.StatusCode == http.StatusNotFound {
		return live, meta, nil
	}
	err = decodeListing(body, func(key string, e compliance.LiveKey) {
		if keep(key) {
			live[key] = e
		}
	})
	return live, meta, err
}

// errListing is a listing that is not the JSON array of KV entries Consul
// answers with.
var errListing = errors.New("unexpected KV listing")

// decodeListing parses a KV listing, [{"Key":..,"Flags":..,"Value":..,
// "Session":..,"LockIndex":..,"ModifyIndex":..,...}, ...], calling f for
// each entry; fields it does not need are skipped. It agrees with
// encoding/json on api.KVPairs (TestDecodeListing_agreesWithEncodingJSON).
func decodeListing(data []byte, f func(key string, e compliance.LiveKey)) error {
	p := &jsonScan{data: data}
	if p.null() {
		return p.end()
	}
	if !p.consume('[') {
		return errListing
	}
	if p.consume(']') {
		return p.end()
	}
	for {
		key, e, err := p.entry()
		if err != nil {
			return err
		}
		f(key, e)
		if p.consume(']') {
			return p.end()
		}
		if !p.consume(',') {
			return errListing
		}
	}
}

// jsonScan reads JSON from data at pos.
type jsonScan struct {
	data []byte
	pos  int
}

func (p *jsonScan) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// consume skips space and then c, if c is next.
func (p *jsonScan) consume(c byte) bool {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *jsonScan) end() error {
	p.skipSpace()
	if p.pos != len(p.data) {
		return errListing
	}
	return nil
}

// entry reads one KV entry object.
func (p *jsonScan) entry() (string, compliance.LiveKey, error) {
	var key string
	var e compliance.LiveKey
	if !p.consume('{') {
		return "", e, errListing
	}
	if p.consume('}') {
		return "", e, nil
	}
	for {
		name, err := p.str()
		if err != nil {
			return "", e, err
		}
		if !p.consume(':') {
			return "", e, errListing
		}
		switch name {
		case "Key":
			key, err = p.str()
		case "Session":
			e.Session, err = p.strOrNull()
		case "Value":
			var s string
			if s, err = p.strOrNull(); err == nil && s != "" {
				e.Value, err = base64.StdEncoding.DecodeString(s)
			}
		case "Flags":
			e.Flags, err = p.uint()
		case "LockIndex":
			e.LockIndex, err = p.uint()
		case "ModifyIndex":
			e.ModifyIndex, err = p.uint()
		default:
			err = p.skipValue()
		}
		if err != nil {
			return "", e, err
		}
		if p.consume('}') {
			return key, e, nil
		}
		if !p.consume(',') {
			return "", e, errListing
		}
	}
}

// str reads a string; one with escapes is unquoted by encoding/json.
func (p *jsonScan) str() (string, error) {
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return "", errListing
	}
	start := p.pos
	escaped := false
	for i := start + 1; i < len(p.data); i++ {
		switch p.data[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			p.pos = i + 1
			if !escaped {
				return string(p.data[start+1 : i]), nil
			}
			var s string
			if err := json.Unmarshal(p.data[start:p.pos], &s); err != nil {
				return "", err
			}
			return s, nil
		}
	}
	return "", errListing
}

func (p *jsonScan) strOrNull() (string, error) {
	if p.null() {
		return "", nil
	}
	return p.str()
}

func (p *jsonScan) null() bool {
	p.skipSpace()
	if bytes.HasPrefix(p.data[p.pos:], []byte("null")) {
		p.pos += 4
		return true
	}
	return false
}

// uint reads an unsigned integer (null is 0).
func (p *jsonScan) uint() (uint64, error) {
	if p.null() {
		return 0, nil
	}
	start := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return strconv.ParseUint(string(p.data[start:p.pos]), 10, 64)
}

// skipValue skips any JSON value (the fields an entry has besides those
// the watch reads: CreateIndex, Namespace, Partition, ...).
func (p *jsonScan) skipValue() error {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return errListing
	}
	switch c := p.data[p.pos]; c {
	case '"':
		_, err := p.str()
		return err
	case '{', '[':
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		p.pos++
		if p.consume(closing) {
			return nil
		}
		for {
			if c == '{' {
				if _, err := p.str(); err != nil {
					return err
				}
				if !p.consume(':') {
					return errListing
				}
			}
			if err := p.skipValue(); err != nil {
				return err
			}
			if p.consume(closing) {
				return nil
			}
			if !p.consume(',') {
				return errListing
			}
		}
	default:
		start := p.pos
		for p.pos < len(p.data) && !strings.ContainsRune(",}] \t\n\r", rune(p.data[p.pos])) {
			p.pos++
		}
		if p.pos == start {
			return errListing
		}
		return nil
	}
}
