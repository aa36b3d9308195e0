// Package systemdtimer holds `consullock timer`: it reads a lock's
// declaration from the registry and prints the systemd .timer that starts
// the packaged runner unit, consullock-run@<lock>.service, at every slot
// of the lock's run_once.schedule in its time zone (the events come from
// internal/oncalendar). It writes nothing to Consul.
package systemdtimer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/oncalendar"
)

// Exit codes of `consullock timer` (as status's and pause's).
const (
	ExitOK = 0
	// ExitRefused: the lock has no schedule, or no timer elapses exactly
	// at its slots; nothing was printed.
	ExitRefused = 1
	// ExitUsage: bad flags, an undeclared lock, or a -randomized-delay
	// that could start a slot late.
	ExitUsage = 2
	// ExitConsul: Consul unreachable, or the token may not read the
	// declaration.
	ExitConsul = 3
)

// Accuracy is the timer's AccuracySec=: systemd may elapse this much
// after the calendar time (its default, a minute, would be a minute late).
const Accuracy = time.Second

// Timer is what the .timer is made from.
type Timer struct {
	Lock    string
	RunOnce ledger.RunOnce
	// Service is the unit the timer starts; "" is DefaultService(Lock).
	Service string
	// Delay is RandomizedDelaySec=, 0 for none.
	Delay time.Duration
	// Command is the command line that made it, quoted in the header.
	Command string
}

// DefaultService is the instance of the packaged template unit
// consullock-run@.service that runs the lock's job.
func DefaultService(lock string) string { return "consullock-run@" + lock + ".service" }

// serviceRE is a systemd service name: unit-name characters, at most one
// "@" followed by an instance (a template without one cannot be started).
var serviceRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$`)

// ServiceName reads -service-name: "S" or "S.service".
func ServiceName(s string) (string, error) {
	if !strings.HasSuffix(s, ".service") {
		s += ".service"
	}
	if len(s) > 255 || !serviceRE.MatchString(s) {
		return "", fmt.Errorf("-service-name %q: want a systemd service unit name such as consullock-run@nightly-report.service "+
			"(letters, digits, ':', '_', '.', '-', '\\', and an instance after '@' for a template)", s)
	}
	return s, nil
}

// Render is the .timer for t at now (the start of the daylight-saving
// check). The error is an *oncalendar.Inexpressible, or names
// run_once.schedule (none) or -randomized-delay (too long).
func Render(t Timer, now time.Time) (string, error) {
	r := t.RunOnce.WithDefaults()
	if r.Schedule == "" {
		return "", fmt.Errorf("lock %q has no run_once.schedule: a timer starts the runner at a schedule's slots "+
			"(declare run_once.schedule and time_zone; a run_once.period lock runs from any trigger inside its period)", t.Lock)
	}
	s, err := r.ParsedSchedule()
	if err != nil {
		return "", err
	}
	events, err := oncalendar.Events(s, now)
	if err != nil {
		return "", err
	}
	if err := checkDelay(t.Delay, r, s, now); err != nil {
		return "", err
	}
	service := t.Service
	if service == "" {
		service = DefaultService(t.Lock)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s.timer: starts %s\n", t.Lock, service)
	fmt.Fprintf(&b, "# at every slot of the consullock lock %s:\n# run_once.schedule %q in %s.\n", t.Lock, s.String(), s.TimeZone())
	if t.Command != "" {
		fmt.Fprintf(&b, "# Made by: %s\n# Make it again when the lock's schedule, time_zone or starting_deadline changes.\n", t.Command)
	}
	fmt.Fprintf(&b, "#   systemctl enable --now %s.timer\n", t.Lock)
	fmt.Fprintf(&b, "[Unit]\nDescription=Slots of the consullock lock %s (%s, %s)\n\n[Timer]\n", t.Lock, s.String(), s.TimeZone())
	if len(events) > 1 {
		b.WriteString("# cron runs on either day field when both are set: one event for each.\n")
	}
	for _, e := range events {
		fmt.Fprintf(&b, "OnCalendar=%s\n", e)
	}
	if t.Delay > 0 {
		within := "before the next slot"
		if r.StartingDeadline > 0 {
			within = "within run_once.starting_deadline (" + lockmodel.ShortDuration(r.StartingDeadline) + ")"
		}
		fmt.Fprintf(&b, "# Each node starts at random up to %s after the slot,\n# %s.\nRandomizedDelaySec=%s\n",
			lockmodel.ShortDuration(t.Delay), within, systemdSpan(t.Delay))
	}
	fmt.Fprintf(&b, "AccuracySec=%s\n", systemdSpan(Accuracy))
	fmt.Fprintf(&b, "# Not Persistent=: a slot no node started is listed by\n# `consullock status -lock %s`; backfill it.\n", t.Lock)
	fmt.Fprintf(&b, "Unit=%s\n\n[Install]\nWantedBy=timers.target\n", service)
	return b.String(), nil
}

// checkDelay refuses a random delay that could make a node's trigger
// late for its slot: at or past the starting deadline (the runner would
// exit 119 on it), or at or past the next slot (the runner would take the
// next slot for its own).
func checkDelay(d time.Duration, r ledger.RunOnce, s ledger.Schedule, now time.Time) error {
	if err := delayProblem(d, r, s, now); err != nil {
		return &DelayError{err}
	}
	return nil
}

// DelayError is a -randomized-delay that Render refuses.
type DelayError struct{ err error }

func (e *DelayError) Error() string { return e.err.Error() }

func delayProblem(d time.Duration, r ledger.RunOnce, s ledger.Schedule, now time.Time) error {
	switch {
	case d < 0:
		return fmt.Errorf("-randomized-delay %s: want 0 or more", d)
	case d == 0:
		return nil
	case d%time.Millisecond != 0:
		return fmt.Errorf("-randomized-delay %s: want whole milliseconds", d)
	case r.StartingDeadline > 0 && d+Accuracy > r.StartingDeadline:
		return fmt.Errorf("-randomized-delay %s is not below run_once.starting_deadline %s by the timer's accuracy (%s): "+
			"a node starting that late would exit %d for its slot; give at most %s",
			lockmodel.ShortDuration(d), lockmodel.ShortDuration(r.StartingDeadline), lockmodel.ShortDuration(Accuracy),
			ledger.ExitRunPastDeadline, lockmodel.ShortDuration(r.StartingDeadline-Accuracy))
	}
	if gap, from := shortestGap(s, now); d+Accuracy >= gap {
		return fmt.Errorf("-randomized-delay %s reaches the next slot: run_once.schedule %q has slots %s apart (from %s), "+
			"and a node starting after the next slot's time runs that slot instead; give less than %s",
			lockmodel.ShortDuration(d), s.String(), lockmodel.ShortDuration(gap), s.SlotID(from), lockmodel.ShortDuration(gap-Accuracy))
	}
	return nil
}

// shortestGap is the shortest time between two consecutive slots of s in
// the year after now (daylight saving included), and the first slot of
// that pair.
func shortestGap(s ledger.Schedule, now time.Time) (time.Duration, time.Time) {
	const maxSlots = 200_000
	gap, from := time.Duration(1<<63-1), time.Time{}
	prev, ok := s.Next(now)
	until := now.AddDate(1, 0, 0)
	for n := 0; ok && n < maxSlots; n++ {
		next, more := s.Next(prev)
		if !more {
			break
		}
		if g := next.Sub(prev); g < gap {
			gap, from = g, prev
		}
		if next.After(until) {
			break
		}
		prev = next
	}
	return gap, from
}

// systemdSpan writes d as a systemd time span.
func systemdSpan(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// Main is `consullock timer -lock NAME [-service-name S] [-randomized-delay D]`.
func Main(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Run(ctx, args, os.Stdout, os.Stderr, time.Now)
}

// Run is Main with its streams and clock, for tests.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, now func() time.Time) int {
	fs := flag.NewFlagSet("timer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var t Timer
	var registry, service string
	fs.StringVar(&t.Lock, "lock", "", "name of the declared lock (consullock_lock), with run_once.schedule")
	fs.StringVar(&service, "service-name", "", "the service the timer starts (default consullock-run@NAME.service, the packaged template's instance)")
	fs.DurationVar(&t.Delay, "randomized-delay", 0, "RandomizedDelaySec: spread the nodes' starts over up to this long after the slot; below run_once.starting_deadline")
	fs.StringVar(&registry, "registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declarations (the provider's registry_prefix)")
	var format logformat.Format
	logformat.Var(fs, &format, logformat.Text)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: consullock timer -lock NAME [-service-name S] [-randomized-delay D] > /etc/systemd/system/NAME.timer\n\n"+
			"Prints the systemd timer that starts consullock-run@NAME.service at every slot of the lock's run_once.schedule, in its time_zone. "+
			"Consul settings come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...; "+
			"the token needs key read on the lock's and its profile's declarations.\n\n"+
			"Exit codes: 0 printed, 1 refused (no schedule, or a schedule no timer follows exactly; the message says why), "+
			"2 usage (also an undeclared lock, or a -randomized-delay that could start a slot late), 3 Consul unreachable or permission denied.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	stderr = logformat.Messages(stderr, format, "consullock timer: ")
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "consullock timer: "+format+"\n", a...)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	if t.Lock == "" {
		return usage("-lock is required: the name of the declared lock")
	}
	if err := lockmodel.ValidateName("-lock", t.Lock); err != nil {
		return usage("%v", err)
	}
	p, err := lockmodel.ValidateRegistryPrefix(registry)
	if err != nil {
		return usage("-registry-prefix: %v", err)
	}
	if service != "" {
		if t.Service, err = ServiceName(service); err != nil {
			return usage("%v", err)
		}
	}
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		return usage("reading the Consul environment: %v", err)
	}
	client, err := consul.New(settings)
	if err != nil {
		return usage("%v", err)
	}
	l, _, err := lockproto.ReadDeclaration(ctx, client, p, t.Lock)
	switch {
	case errors.Is(err, lockproto.ErrNotDeclared):
		return usage("-lock %q: %v", t.Lock, err)
	case err != nil:
		fmt.Fprintf(stderr, "consullock timer: %v\n", err)
		return ExitConsul
	}
	if l.RunOnce != nil {
		t.RunOnce = *l.RunOnce
	}
	t.Command = commandLine(t, service)
	out, err := Render(t, now())
	var delay *DelayError
	switch {
	case err == nil:
		_, _ = io.WriteString(stdout, out)
		return ExitOK
	case errors.As(err, &delay):
		return usage("%v", err)
	}
	fmt.Fprintf(stderr, "consullock timer: %v\n", err)
	return ExitRefused
}

// commandLine is the command that makes the timer, for its header.
func commandLine(t Timer, service string) string {
	c := "consullock timer -lock " + t.Lock
	if service != "" {
		c += " -service-name " + t.Service
	}
	if t.Delay > 0 {
		c += " -randomized-delay " + lockmodel.ShortDuration(t.Delay)
	}
	return c
}
