package lockmodel

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/validation"
)

func TestValidateMaxHold(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string // substring of the error; "" = valid
	}{
		{0, ""},
		{time.Second, ""},
		{2 * time.Hour, ""},
		{500 * time.Millisecond, `max_hold: "500ms" is not allowed; 0s (no limit) or a duration of at least 1s`},
		{-time.Second, `max_hold: "-1s" is not allowed`},
	} {
		err := ValidateMaxHold("max_hold", tc.d)
		checkErr(t, tc.d.String(), err, tc.want)
	}
}

func TestValidateDescription(t *testing.T) {
	checkErr(t, "short", ValidateDescription("description", "nightly report"), "")
	checkErr(t, "max", ValidateDescription("description", strings.Repeat("é", MaxDescriptionLength)), "")
	checkErr(t, "long", ValidateDescription("description", strings.Repeat("a", MaxDescriptionLength+1)),
		"at most 1024 characters (got 1025)")
	checkErr(t, "invalid utf8", ValidateDescription("description", "a\xffb"), "valid UTF-8")
}

func TestValidateLimit(t *testing.T) {
	checkErr(t, "1", ValidateLimit("limit", 1), "")
	checkErr(t, "1024", ValidateLimit("limit", 1024), "")
	checkErr(t, "0", ValidateLimit("limit", 0), `limit: "0" is not allowed; an integer from 1 to 1024`)
	checkErr(t, "-3", ValidateLimit("limit", -3), `limit: "-3" is not allowed`)
	checkErr(t, "1025", ValidateLimit("limit", 1025), `limit: "1025" is not allowed`)
}

func TestKeyPlacementError(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Lock
		want string
	}{
		{"default key", Lock{Prefix: "jobs/a"}, ""},
		{"raw key under prefix", Lock{Prefix: "service/job", Key: "service/job/leader"}, ""},
		{"key equal to prefix", Lock{Prefix: "service/job", Key: "/service/job/"}, ""},
		{"key outside prefix", Lock{Prefix: "service/job", Key: "other/leader"}, `key: "other/leader" is not allowed; a key equal to the prefix "service/job" or under it`},
		{"semaphore raw key", Lock{Prefix: "jobs/a", Key: "jobs/a/leader", Limit: 3}, `for a semaphore (limit > 1) the key must be "jobs/a/.lock"`},
		{"semaphore default key", Lock{Prefix: "jobs/a", Limit: 3}, ""},
		{"bad prefix is not ours", Lock{Prefix: "a/../b", Key: "x"}, ""},
		{"bad limit ignored", Lock{Prefix: "jobs/a", Limit: -1}, ""},
		{"invalid name ignored", Lock{Name: "bad name", Prefix: "jobs/a"}, ""},
	} {
		checkErr(t, tc.name, tc.l.KeyPlacementError(), tc.want)
	}
}

func TestSemaphoreValueWithLimit(t *testing.T) {
	got, err := SemaphoreValueWithLimit([]byte(`{"Limit":3,"Holders":{"b":true,"a":true}}`), 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Limit":5,"Holders":{"a":true,"b":true}}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
	got, err = SemaphoreValueWithLimit(nil, 5)
	if err != nil || len(got) != 0 {
		t.Errorf("empty value: got %q, %v; want it left empty", got, err)
	}
	if _, err := SemaphoreValueWithLimit([]byte(`not json`), 5); err == nil {
		t.Error("undecodable value: want an error")
	}
	if _, err := SemaphoreValueWithLimit([]byte(`{"Limit":3,"Holders":{}}`), 0); err == nil {
		t.Error("limit 0: want an error")
	}
}

func TestLockKindText(t *testing.T) {
	if got := (Lock{Limit: 1}).LockKindText(); got != "mutex" {
		t.Errorf("got %q", got)
	}
	if got := (Lock{Limit: 4}).LockKindText(); got != "semaphore (limit 4)" {
		t.Errorf("got %q", got)
	}
}

func checkErr(t *testing.T, name string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: unexpected error %v", name, err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: got error %v, want one containing %q", name, err, want)
		return
	}
	var fe *validation.FieldError
	if !errors.As(err, &fe) {
		t.Errorf("%s: error %T is not a *FieldError", name, err)
	}
}
