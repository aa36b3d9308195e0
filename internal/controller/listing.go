package controller

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// A lock key watch lists every key under its prefix at each change there,
// so the listing is what a change costs once the decisions are
// incremental: at 10,000 keys the answer is about 2 MB of JSON. The watch
// therefore reads it the cheapest way Consul allows: uncompressed (the
// agent is a loopback or LAN hop away; gzip cost the agent and the
// controller more than the bytes it saved), parsed without reflection,
// and walked alongside the previous answer (Consul lists keys in order):
// a key whose ModifyIndex did not move is neither decoded nor copied,
// and only the keys that changed, appeared or went reach the controller.

// listed is one key of a lock key watch's last answer.
type listed struct {
	key         string
	modifyIndex uint64
	covered     bool // kept by the group (group.covers)
}

// keyChange is a key a lock key watch answer changed: present with its new
// entry, or gone.
type keyChange struct {
	key     string
	entry   lockmodel.KeyEntry
	present bool
}

// listMeta is what a lock key watch needs of an answer's headers.
type listMeta struct {
	lastIndex uint64
	filtered  bool // X-Consul-Results-Filtered-By-ACLs
}

// listKeys is GET /v1/kv/<prefix>?recurse as a blocking query on f.Index,
// through the watch client (its token, TLS, headers, datacenter, namespace
// and partition). It returns the answer's keys and the changes from prev
// (the previous answer; nil for none) among the keys covers selects. An
// empty prefix (404) is an empty listing; other statuses are
// api.StatusError, as the api reports them.
func listKeys(ctx context.Context, cl *consul.Client, prefix string, f *consul.Follower,
	prev []listed, covers func(string) bool) ([]listed, []keyChange, listMeta, error) {
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
	if index := f.Index(); index != 0 {
		params.Set("index", strconv.FormatUint(index, 10))
		params.Set("wait", fmt.Sprintf("%dms", max(f.Wait/time.Millisecond, 1)))
	}
	u := url.URL{Scheme: cl.Scheme, Host: cl.Address, Path: "/v1/kv/" + strings.TrimPrefix(prefix, "/"), RawQuery: params.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, listMeta{}, err
	}
	for k, vs := range cl.Headers() {
		req.Header[k] = vs
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := cl.HTTPClient().Do(req)
	if err != nil {
		return nil, nil, listMeta{}, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, nil, listMeta{}, err
	}
	body := buf.Bytes()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return nil, nil, listMeta{}, api.StatusError{Code: resp.StatusCode, Body: strings.TrimSpace(string(body))}
	}
	var meta listMeta
	if v := resp.Header.Get("X-Consul-Index"); v != "" {
		if meta.lastIndex, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, nil, listMeta{}, fmt.Errorf("X-Consul-Index %q: %w", v, err)
		}
	}
	meta.filtered = resp.Header.Get("X-Consul-Results-Filtered-By-ACLs") == "true"
	if resp.StatusCode == http.StatusNotFound {
		body = nil
	}
	next, changes, err := diffListing(body, prev, covers)
	return next, changes, meta, err
}

// diffListing parses a listing (nil: empty) and returns its keys and the
// changes from prev among the keys covers selects. A key listed in prev
// with the same ModifyIndex is skipped without decoding its entry.
func diffListing(data []byte, prev []listed, covers func(string) bool) ([]listed, []keyChange, error) {
	next := make([]listed, 0, len(prev))
	var changes []keyChange
	gone := func(l listed) {
		if l.covered {
			changes = append(changes, keyChange{key: l.key})
		}
	}
	i := 0
	err := decodeListing(data, func(e *rawEntry) error {
		raw, mi := e.key, e.modifyIndex
		if e.keyEscaped {
			// Compare the key itself: Consul orders keys by their bytes,
			// not by their JSON text.
			key, err := unquote(raw, true)
			if err != nil {
				return err
			}
			raw = []byte(key)
		}
		for i < len(prev) && prev[i].key < string(raw) {
			gone(prev[i])
			i++
		}
		if i < len(prev) && prev[i].key == string(raw) {
			l := prev[i]
			i++
			if l.modifyIndex == mi {
				next = append(next, l)
				return nil
			}
			l.modifyIndex = mi
			if l.covered {
				_, le, err := e.decode()
				if err != nil {
					return err
				}
				changes = append(changes, keyChange{key: l.key, entry: le, present: true})
			}
			next = append(next, l)
			return nil
		}
		key, le, err := e.decode()
		if err != nil {
			return err
		}
		l := listed{key: key, modifyIndex: mi, covered: covers(key)}
		if l.covered {
			changes = append(changes, keyChange{key: key, entry: le, present: true})
		}
		next = append(next, l)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for ; i < len(prev); i++ {
		gone(prev[i])
	}
	return next, changes, nil
}

// errListing is a listing that is not the JSON array of KV entries Consul
// answers with.
var errListing = errors.New("unexpected KV listing")

// decodeListing parses a KV listing, [{"Key":..,"Flags":..,"Value":..,
// "Session":..,"LockIndex":..,"ModifyIndex":..,...}, ...] (or null, or
// nothing), calling f for each entry as parsed (rawEntry: its key as
// listed, still escaped when it holds escapes, and its ModifyIndex; decode
// gives the key and the entry). Fields it does not need are skipped. It agrees with
// encoding/json on api.KVPairs (TestDecodeListing_agreesWithEncodingJSON).
func decodeListing(data []byte, f func(e *rawEntry) error) error {
	p := &jsonScan{data: data}
	if len(data) == 0 || p.null() {
		return p.end()
	}
	if !p.consume('[') {
		return errListing
	}
	if p.consume(']') {
		return p.end()
	}
	var e rawEntry
	for {
		e = rawEntry{}
		if err := p.entry(&e); err != nil {
			return err
		}
		if err := f(&e); err != nil {
			return err
		}
		if p.consume(']') {
			return p.end()
		}
		if !p.consume(',') {
			return errListing
		}
	}
}

// rawEntry is a listing entry as parsed: its strings still quoted.
type rawEntry struct {
	key, session, value []byte // the JSON strings without their quotes; nil when null or absent
	keyEscaped          bool
	flags, lockIndex    uint64
	modifyIndex         uint64
}

// decode returns the entry's key and its KeyEntry.
func (e *rawEntry) decode() (string, lockmodel.KeyEntry, error) {
	key, err := unquote(e.key, e.keyEscaped)
	if err != nil {
		return "", lockmodel.KeyEntry{}, err
	}
	le := lockmodel.KeyEntry{Flags: e.flags, LockIndex: e.lockIndex, ModifyIndex: e.modifyIndex}
	if e.session != nil {
		if le.Session, err = unquote(e.session, bytes.IndexByte(e.session, '\\') >= 0); err != nil {
			return "", lockmodel.KeyEntry{}, err
		}
	}
	if len(e.value) > 0 {
		le.Value = make([]byte, base64.StdEncoding.DecodedLen(len(e.value)))
		n, err := base64.StdEncoding.Decode(le.Value, e.value)
		if err != nil {
			return "", lockmodel.KeyEntry{}, fmt.Errorf("%w: Value of %q: %w", errListing, key, err)
		}
		le.Value = le.Value[:n]
	}
	return key, le, nil
}

// unquote turns the inside of a JSON string into its text.
func unquote(inside []byte, escaped bool) (string, error) {
	if !escaped {
		return string(inside), nil
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, inside...), '"'), &s); err != nil {
		return "", err
	}
	return s, nil
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
func (p *jsonScan) entry(e *rawEntry) error {
	if !p.consume('{') {
		return errListing
	}
	if p.consume('}') {
		return nil
	}
	for {
		name, _, err := p.str()
		if err != nil {
			return err
		}
		if !p.consume(':') {
			return errListing
		}
		switch string(name) {
		case "Key":
			e.key, e.keyEscaped, err = p.str()
		case "Session":
			e.session, err = p.strOrNull()
		case "Value":
			e.value, err = p.strOrNull()
		case "Flags":
			e.flags, err = p.uint()
		case "LockIndex":
			e.lockIndex, err = p.uint()
		case "ModifyIndex":
			e.modifyIndex, err = p.uint()
		default:
			err = p.skipValue()
		}
		if err != nil {
			return err
		}
		if p.consume('}') {
			return nil
		}
		if !p.consume(',') {
			return errListing
		}
	}
}

// str reads a string and returns its inside, still escaped, and whether it
// holds escapes.
func (p *jsonScan) str() ([]byte, bool, error) {
	p.skipSpace()
	if p.pos >= len(p.data) || p.data[p.pos] != '"' {
		return nil, false, errListing
	}
	start := p.pos + 1
	escaped := false
	for i := start; i < len(p.data); i++ {
		switch p.data[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			p.pos = i + 1
			return p.data[start:i], escaped, nil
		}
	}
	return nil, false, errListing
}

// strOrNull reads a string's inside (nil for null).
func (p *jsonScan) strOrNull() ([]byte, error) {
	if p.null() {
		return nil, nil
	}
	s, _, err := p.str()
	if s == nil && err == nil {
		s = []byte{}
	}
	return s, err
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
		_, _, err := p.str()
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
				if _, _, err := p.str(); err != nil {
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
