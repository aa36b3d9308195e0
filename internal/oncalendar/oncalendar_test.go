package oncalendar

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
)

// now is the tests' start of the daylight-saving check.
var now = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func events(t *testing.T, expr, zone string) ([]string, error) {
	t.Helper()
	s, err := ledger.ParseSchedule(expr, zone)
	if err != nil {
		t.Fatal(err)
	}
	return Events(s, now)
}

// TestEvents_written: what a reader of the timer sees for common
// schedules; steps become repetitions or lists, both day fields two events.
func TestEvents_written(t *testing.T) {
	for _, tc := range []struct{ expr, zone, want string }{
		{"0 2 * * *", "UTC", "*-*-* 02:00:00 UTC"},
		{"0 2 * * 1-5", "Europe/Berlin", "Mon..Fri *-*-* 02:00:00 Europe/Berlin"},
		{"30 1 * * 0,6", "America/New_York", "Sat,Sun *-*-* 01:30:00 America/New_York"},
		{"*/15 * * * *", "UTC", "*-*-* *:00/15:00 UTC"},
		{"5/20 9-17 * * *", "UTC", "*-*-* 09..17:05/20:00 UTC"},
		{"0 0 */2 * *", "UTC", "*-*-01/2 00:00:00 UTC"},
		{"0 0 1,15 */3 *", "Asia/Tokyo", "*-01/3-01,15 00:00:00 Asia/Tokyo"},
		{"0 6 * * sun-fri", "UTC", "Mon..Fri,Sun *-*-* 06:00:00 UTC"},
		{"0 6 * * */2", "UTC", "Tue,Thu,Sat,Sun *-*-* 06:00:00 UTC"},
		{"@weekly", "UTC", "Sun *-*-* 00:00:00 UTC"},
		{"@monthly", "UTC", "*-*-01 00:00:00 UTC"},
		{"@hourly", "UTC", "*-*-* *:00:00 UTC"},
		{"0 0 1 * 1", "UTC", "*-*-01 00:00:00 UTC | Mon *-*-* 00:00:00 UTC"},
		{"0 0 30 2 1", "UTC", "Mon *-02-* 00:00:00 UTC"}, // 30 February: only the Mondays
		{"0 3 * * *", "Europe/Berlin", "*-*-* 03:00:00 Europe/Berlin"},
		{"30 2 * * *", "Europe/London", "*-*-* 02:30:00 Europe/London"}, // the gap is 01:00-02:00
	} {
		got, err := events(t, tc.expr, tc.zone)
		if err != nil || strings.Join(got, " | ") != tc.want {
			t.Errorf("%q in %s: %q, %v; want %q", tc.expr, tc.zone, got, err, tc.want)
		}
	}
}

// TestEvents_refusesASlotSystemdSkips: a schedule that matches a time the
// clocks skip, on a night whose gap end it does not match, is refused,
// naming the night and the skipped times.
func TestEvents_refusesASlotSystemdSkips(t *testing.T) {
	for _, tc := range []struct{ expr, zone, want string }{
		{"0 2 * * *", "Europe/Berlin", "on 2027-03-28 the clocks skip from 02:00 to 03:00"},
		{"30 2 * * 0", "America/New_York", "on 2027-03-14 the clocks skip from 02:00 to 03:00"},
		{"*/20 2 * * *", "Europe/Berlin", "matches no time from 02:00 to 02:59"},
		{"0 0 * * *", "America/Havana", "the clocks change from 00:00 to 01:00, off the hour or at midnight"},
		{"0 2 28 3 *", "Europe/Berlin", "on 2027-03-28"},
		{"0 2 29 3 *", "Europe/Berlin", "on 2037-03-29"}, // the first year the last Sunday of March is the 29th
	} {
		_, err := events(t, tc.expr, tc.zone)
		var in *Inexpressible
		if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q in %s: %v; want a refusal with %q", tc.expr, tc.zone, err, tc.want)
		}
	}
	// Not refused: the skipped times are never matched on such nights, or
	// the gap end is matched too.
	for _, tc := range []struct{ expr, zone string }{
		{"0 2 * * 1-5", "Europe/Berlin"}, // the EU's clocks change on Sundays
		{"0 2,3 * * *", "Europe/Berlin"}, // one slot at 03:00 on that night, where 03:00 elapses too
		{"*/15 * * * *", "Europe/Berlin"},
		{"30 2 * * *", "Asia/Tokyo"}, // no daylight saving
	} {
		if _, err := events(t, tc.expr, tc.zone); err != nil {
			t.Errorf("%q in %s: %v", tc.expr, tc.zone, err)
		}
	}
}

var (
	agreementExprs = []string{
		"0 2 * * *", "30 2 * * *", "0 3 * * *", "30 1 * * *", "*/15 * * * *", "*/20 2 * * *", "0 2 * * 1-5",
		"5 0 1 * mon", "0 0 1,15 * *", "0 */2 * * *", "5/20 * * * *", "0 9-17 * * 1-5", "0 0 * jan,jul sun",
		"@monthly", "@weekly", "@daily", "@hourly", "30 1 * * 0,6", "0 0 1-7 * 1", "59 23 31 12 *",
		"0 12 */2 * *", "0 0 * */3 *", "45 23 * * 6", "15 0 * * *", "0,30 0-3 * * *",
	}
	agreementZones = []string{
		"UTC", "Europe/Berlin", "Europe/London", "America/New_York", "America/Havana", "Asia/Beirut",
		"Australia/Lord_Howe", "Pacific/Chatham", "Asia/Kathmandu", "America/Sao_Paulo", "Etc/GMT+5",
	}
)

// chain is where the agreement tests start and how far they follow a
// timer's elapses, each computed from the one before as systemd does
// from a timer's last trigger: from an ordinary day, and from a day
// before each of the zone's transitions in 2027 to three hours after it.
type chain struct {
	from, until time.Time
}

func chains(loc *time.Location) []chain {
	out := []chain{{time.Date(2027, 1, 15, 10, 7, 0, 0, time.UTC), time.Time{}}}
	for t := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC); ; {
		_, b := t.In(loc).ZoneBounds()
		if b.IsZero() || b.Year() > 2027 {
			return out
		}
		out = append(out, chain{b.Add(-26 * time.Hour), b.Add(3 * time.Hour)})
		t = b
	}
}

// slots is the schedule's slots along c: the next three, and every one
// up to c.until.
func (c chain) slots(s ledger.Schedule) []time.Time {
	out := s.NextSlots(c.from, 3)
	for len(out) > 0 && out[len(out)-1].Before(c.until) {
		next, ok := s.Next(out[len(out)-1])
		if !ok {
			break
		}
		out = append(out, next)
	}
	return out
}

type agreementCase struct {
	expr, zone string
	sched      ledger.Schedule
	events     []string
	refused    error
}

func agreementCases(t *testing.T) []agreementCase {
	var out []agreementCase
	for _, zone := range agreementZones {
		for _, expr := range agreementExprs {
			s, err := ledger.ParseSchedule(expr, zone)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := Events(s, now)
			out = append(out, agreementCase{expr, zone, s, ev, err})
		}
	}
	return out
}

func parseEvents(t *testing.T, texts []string) []event {
	var out []event
	for _, text := range texts {
		e, err := parseEvent(text)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestEvents_elapseAtTheSlots: the events' elapses, read back from their
// text by systemd's rule (model_test.go), are the schedule's slots
// (ledger.Schedule, which the provider's run_once.next_slots shows):
// the next three from an ordinary day, and every one through each
// transition of 2027, in zones with and without daylight saving, with
// half-hour and 45-minute offsets, and transitions at midnight. A
// schedule refused for a skipped time disagrees on that night: the
// refusal is not over-cautious.
func TestEvents_elapseAtTheSlots(t *testing.T) {
	refused := 0
	for _, c := range agreementCases(t) {
		texts := c.events
		if c.refused != nil {
			refused++
			texts = zoned(t, c.expr, c.zone)
		}
		disagree := false
		for _, ch := range chains(c.sched.Location()) {
			want := ch.slots(c.sched)
			got := elapses(parseEvents(t, texts), ch.from, len(want))
			same := slices.EqualFunc(got, want, time.Time.Equal)
			disagree = disagree || !same
			if c.refused == nil && !same {
				t.Errorf("%q in %s from %s: events %q elapse at\n%v; the slots are\n%v", c.expr, c.zone, ch.from.Format(time.RFC3339), c.events, got, want)
			}
		}
		if c.refused != nil && strings.Contains(c.refused.Error(), " the clocks skip ") && strings.Contains(c.refused.Error(), "2027-") && !disagree {
			t.Errorf("%q in %s refused (%v), yet its events elapse at its slots", c.expr, c.zone, c.refused)
		}
	}
	t.Logf("%d schedules x zones, %d refused", len(agreementExprs)*len(agreementZones), refused)
}

// zoned is the events Events writes for expr in UTC with zone's suffix:
// a refused schedule's events, as they would read without the check.
func zoned(t *testing.T, expr, zone string) []string {
	utc, _ := ledger.ParseSchedule(expr, "UTC")
	texts, err := Events(utc, now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		texts[i] = strings.TrimSuffix(texts[i], "UTC") + zone
	}
	return texts
}

// TestEvents_systemdAnalyzeAgrees: systemd itself elapses the events at
// the schedule's slots along the same chains (systemd-analyze calendar
// --iterations=N --base-time=..., each iteration from the one before as
// a timer's next elapse is from its last trigger), writes every event in
// the form Events wrote it (its normalized form), and reads the refused
// schedules' events differently from their slots.
func TestEvents_systemdAnalyzeAgrees(t *testing.T) {
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not on this machine: install systemd (.ci/run does as root); without it the events are checked against the slots only by systemd's rule as TestEvents_elapseAtTheSlots states it, not by systemd")
	}
	cases := agreementCases(t)
	var all []string
	for _, c := range cases {
		all = append(all, c.events...)
	}
	if norm := systemdNormalized(t, bin, all); !slices.Equal(norm, all) {
		for i := range all {
			if norm[i] != all[i] {
				t.Errorf("systemd normalizes %q to %q", all[i], norm[i])
			}
		}
	}
	calls, checked := 0, 0
	disagree := map[int]bool{}
	for _, zone := range agreementZones {
		loc, _ := time.LoadLocation(zone)
		for _, ch := range chains(loc) {
			var texts []string
			var owner []int // the case of each text
			n := 3
			for i, c := range cases {
				if c.zone != zone {
					continue
				}
				ev := c.events
				if c.refused != nil && !strings.Contains(c.refused.Error(), " the clocks skip ") {
					continue // near a transition systemd may even fail to compute: not run
				}
				if c.refused != nil {
					ev = zoned(t, c.expr, c.zone)
				}
				for _, e := range ev {
					texts, owner = append(texts, e), append(owner, i)
				}
				n = max(n, len(ch.slots(c.sched)))
			}
			got := systemdElapses(t, bin, loc, ch.from, n, texts)
			calls++
			byCase := map[int][]time.Time{}
			for j, i := range owner {
				byCase[i] = append(byCase[i], got[j]...)
			}
			for i, c := range cases {
				if c.zone != zone {
					continue
				}
				want := ch.slots(c.sched)
				elapsed := byCase[i]
				slices.SortFunc(elapsed, time.Time.Compare)
				elapsed = slices.CompactFunc(elapsed, time.Time.Equal)
				elapsed = elapsed[:min(len(elapsed), len(want))]
				same := slices.EqualFunc(elapsed, want, time.Time.Equal)
				if c.refused == nil && !same {
					t.Errorf("%q in %s from %s: systemd elapses %q at\n%v; the slots are\n%v", c.expr, c.zone, ch.from.Format(time.RFC3339), c.events, elapsed, want)
				}
				if c.refused == nil {
					checked++
				}
				disagree[i] = disagree[i] || !same

			}
		}
	}
	for i, c := range cases {
		if c.refused != nil && strings.Contains(c.refused.Error(), " the clocks skip ") && strings.Contains(c.refused.Error(), "2027-") && !disagree[i] {
			t.Errorf("%q in %s refused (%v), yet systemd elapses its events at its slots", c.expr, c.zone, c.refused)
		}
	}
	t.Logf("%s: %d calls, %d chains of accepted schedules agree with the slots", bin, calls, checked)
}

// systemdNormalized is systemd's normalized form of each event.
func systemdNormalized(t *testing.T, bin string, texts []string) []string {
	out := runSystemdAnalyze(t, bin, "UTC", append([]string{"--iterations=0"}, texts...))
	var norm []string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Normalized form: "); ok {
			norm = append(norm, v)
		}
	}
	if len(norm) != len(texts) {
		t.Fatalf("systemd-analyze normalized %d events of %d:\n%s", len(norm), len(texts), out)
	}
	return norm
}

// systemdElapses is the first n elapses after from of each event, by
// systemd-analyze. The events are given in the local zone of the process
// (TZ=:zone), without their zone suffix: systemd computes an event with a
// suffix by setting TZ so in a child process and calling the same code,
// which costs a fork per elapse.
func systemdElapses(t *testing.T, bin string, loc *time.Location, from time.Time, n int, texts []string) [][]time.Time {
	t.Helper()
	args := []string{"--iterations=" + strconv.Itoa(n), "--base-time=@" + strconv.FormatInt(from.Unix(), 10)}
	for _, text := range texts {
		args = append(args, strings.TrimSuffix(text, " "+loc.String()))
	}
	out := runSystemdAnalyze(t, bin, loc.String(), args)
	var res [][]time.Time
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		key, stamp, _ := strings.Cut(line, ": ")
		switch {
		case key == "Normalized form":
			res = append(res, nil)
		case stamp == "never":
		case key == "Next elapse", strings.HasPrefix(key, "Iter. #"), key == "(in UTC)":
			if !strings.HasSuffix(stamp, " UTC") {
				continue // local time: its "(in UTC)" line follows
			}
			at, err := time.Parse("Mon 2006-01-02 15:04:05 MST", stamp)
			if err != nil {
				t.Fatalf("systemd-analyze line %q: %v", line, err)
			}
			res[len(res)-1] = append(res[len(res)-1], at)
		}
	}
	if len(res) != len(texts) {
		t.Fatalf("systemd-analyze read %d events of %d:\n%s", len(res), len(texts), out)
	}
	return res
}

func runSystemdAnalyze(t *testing.T, bin, zone string, args []string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--no-pager", "calendar"}, args...)...)
	cmd.Env = append(os.Environ(), "TZ=:"+zone, "SYSTEMD_COLORS=0", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze %q: %v\n%s", args, err, out)
	}
	return string(out)
}
