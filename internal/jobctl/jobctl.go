// Package jobctl holds the job-control programs: `consullock pause`,
// `consullock resume` (a lock's pause record, record.Pause) and
// `consullock release` (end a stuck holder's session). They change Consul
// only after every flag is valid and the lock is known: bad input writes
// nothing.
package jobctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
	"github.com/consullock/terraform-provider-consullock/internal/logformat"
	"github.com/consullock/terraform-provider-consullock/internal/record"
	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// Exit codes of pause, resume and release (as status's).
const (
	ExitOK = 0
	// ExitRefused: nothing to do or not confirmed (release of an unheld
	// lock, resume of an unpaused one, no -yes without a terminal, a pause
	// that -force would replace); nothing was changed.
	ExitRefused = 1
	// ExitUsage: bad flags (a reason too long, an unknown lock, ...);
	// nothing was written.
	ExitUsage = 2
	// ExitConsul: Consul unreachable, or the token lacks a permission
	// (the message names the rule).
	ExitConsul = 3
)

// env is what a program runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	isTerminal     func() bool
	now            func() time.Time
}

func osEnv() env {
	return env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, isTerminal: stdinIsTerminal, now: time.Now}
}

// stdinIsTerminal reports whether standard input is a character device (a
// terminal), not a pipe, file or /dev/null.
func stdinIsTerminal() bool {
	fi, err := os.Stdin.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && fi.Mode()&os.ModeNamedPipe == 0
}

// PauseMain is `consullock pause -lock NAME -reason TEXT`.
func PauseMain(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Pause(ctx, args, osEnv())
}

// ResumeMain is `consullock resume -lock NAME`.
func ResumeMain(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Resume(ctx, args, osEnv())
}

// ReleaseMain is `consullock release -lock NAME [-session ID] -reason TEXT [-yes]`.
func ReleaseMain(ctx context.Context, args []string) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return Release(ctx, args, osEnv())
}

// common are the flags every job-control program takes.
type common struct {
	prog     string
	lock     string
	registry string
	by       string
	reason   string
	format   logformat.Format
	// accessor is the caller's token accessor ID (accessor), once read.
	accessor string
}

func newFlags(synopsis, summary string, e env, c *common, withReason bool) *flag.FlagSet {
	prog, _, _ := strings.Cut(synopsis, " ")
	fs := flag.NewFlagSet(prog, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	c.prog = prog
	fs.StringVar(&c.lock, "lock", "", "name of the declared lock (consullock_lock)")
	fs.StringVar(&c.registry, "registry-prefix", lockmodel.DefaultRegistryPrefix, "KV prefix of the declarations (the provider's registry_prefix)")
	fs.StringVar(&c.by, "by", "", "who is acting, recorded with the change next to the token's accessor ID (default: user@host)")
	logformat.Var(fs, &c.format, logformat.Text)
	if withReason {
		fs.StringVar(&c.reason, "reason", "", fmt.Sprintf("why (required; one line, at most %d characters), shown in runner logs and status", record.MaxPauseReasonLength))
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: consullock %s\n\n%s\n\nConsul settings come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, ...\n\nExit codes: 0 done, 1 refused or nothing to do (nothing changed), 2 usage or unknown lock (nothing written), 3 Consul unreachable or permission denied.\n\n", synopsis, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and checks the common flags; code >= 0 means exit.
func (c *common) parse(fs *flag.FlagSet, args []string, e *env, withReason bool) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	// Messages on stderr: as they are in text, one event a line in json.
	e.stderr = logformat.Messages(e.stderr, c.format, "consullock "+c.prog+": ")
	usage := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "consullock %s: "+format+"; nothing was written\n", append([]any{fs.Name()}, a...)...)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	if c.lock == "" {
		return usage("-lock is required: the name of the declared lock")
	}
	if err := lockmodel.ValidateName("-lock", c.lock); err != nil {
		return usage("%v", err)
	}
	p, err := lockmodel.ValidateRegistryPrefix(c.registry)
	if err != nil {
		return usage("-registry-prefix: %v", err)
	}
	c.registry = p
	if withReason {
		if err := record.ValidateReason("-reason", c.reason); err != nil {
			return usage("%v", err)
		}
	}
	if c.by == "" {
		c.by = defaultBy()
	}
	if n := len([]rune(c.by)); n > 256 {
		return usage("-by: at most 256 characters (got %d)", n)
	}
	return -1
}

// defaultBy is user@host.
func defaultBy() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	switch {
	case name == "" && host == "":
		return "unknown"
	case host == "":
		return name
	}
	return name + "@" + host
}

// accessor is the accessor ID of the caller's token (/v1/acl/token/self;
// never its secret), recorded next to -by; "" when Consul cannot say
// (ACLs disabled). A token that is not valid fails the next request with
// its own error.
func accessor(ctx context.Context, client *consul.Client) string {
	t, _, err := client.ACL().TokenReadSelf((&api.QueryOptions{}).WithContext(ctx))
	if err != nil || t == nil {
		return ""
	}
	return t.AccessorID
}

// actor is who acts, as messages show it: -by and the token's accessor ID.
func actor(by, accessor string) string {
	if accessor == "" {
		return by
	}
	return by + " (token " + accessor + ")"
}

// connect builds the client and reads the lock's declaration; code >= 0
// means exit (an unknown lock is a usage error naming -lock).
func (c *common) connect(ctx context.Context, e env) (*consul.Client, lockmodel.Lock, lockmodel.Profile, int) {
	settings, err := consul.SettingsFromEnv()
	if err != nil {
		fmt.Fprintf(e.stderr, "consullock %s: reading the Consul environment: %v\n", c.prog, err)
		return nil, lockmodel.Lock{}, lockmodel.Profile{}, ExitUsage
	}
	client, err := consul.New(settings)
	if err != nil {
		fmt.Fprintf(e.stderr, "consullock %s: %v\n", c.prog, err)
		return nil, lockmodel.Lock{}, lockmodel.Profile{}, ExitUsage
	}
	l, p, err := lockproto.ReadDeclaration(ctx, client, c.registry, c.lock)
	if errors.Is(err, lockproto.ErrNotDeclared) {
		fmt.Fprintf(e.stderr, "consullock %s: -lock %q: %v%s; nothing was written\n", c.prog, c.lock, err, declaredNames(ctx, client, c.registry))
		return nil, l, p, ExitUsage
	}
	if err != nil {
		return nil, l, p, c.consulError(e, err)
	}
	return client, l, p, -1
}

// declaredNames is "; declared: a, b" for an unknown -lock: the names of
// the lock records the token may list (at most 20); "" when it may list
// none.
func declaredNames(ctx context.Context, client *consul.Client, registry string) string {
	const shown = 20
	recs, _, err := store.New(client).Registry(registry).List(ctx, lockmodel.KindLock)
	if err != nil || len(recs) == 0 {
		return ""
	}
	names := make([]string, 0, len(recs))
	for _, r := range recs {
		names = append(names, path.Base(r.Key))
	}
	sort.Strings(names)
	if len(names) > shown {
		return fmt.Sprintf("; declared: %s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return "; declared: " + strings.Join(names, ", ")
}

func (c *common) consulError(e env, err error) int {
	fmt.Fprintf(e.stderr, "consullock %s: %v\n", c.prog, err)
	return ExitConsul
}

// Pause writes the lock's pause record.
func Pause(ctx context.Context, args []string, e env) int {
	var c common
	fs := newFlags("pause -lock NAME -reason TEXT [-force]", "Pauses a lock: new `consullock run` processes do not run the command (they log who paused it, when and why, and exit 0 or -exit-code-if-paused), waiters leave, and a command already running is left to finish. Writes <registry-prefix>/pauses/NAME with -by and the token's accessor ID. Refuses to replace another pause without -force. A lock whose consullock_lock sets paused is Terraform's: a pause here shows as drift in the next plan.", e, &c, true)
	force := fs.Bool("force", false, "replace an existing pause (its reason, author and time)")
	if code := c.parse(fs, args, &e, true); code >= 0 {
		return code
	}
	client, _, _, code := c.connect(ctx, e)
	if code >= 0 {
		return code
	}
	reg := store.New(client).Registry(c.registry)
	old, index, err := reg.ReadPause(ctx, c.lock)
	if err != nil && !isBadRecord(err) {
		return c.consulError(e, err)
	}
	p := record.Pause{Lock: c.lock, Reason: c.reason, By: c.by, At: e.now().UTC().Truncate(time.Second), Accessor: accessor(ctx, client)}
	if old != nil && old.Reason == p.Reason {
		fmt.Fprintf(e.stdout, "lock %s is already paused by %s since %s: %s\n", c.lock, actor(old.By, old.Accessor), old.At.Format(time.RFC3339), old.Reason)
		return ExitOK
	}
	if old != nil && !*force {
		fmt.Fprintf(e.stderr, "consullock pause: lock %s is already paused by %s since %s: %s; nothing was changed. Pass -force to replace that pause (its reason, author and time)%s\n",
			c.lock, actor(old.By, old.Accessor), old.At.Format(time.RFC3339), old.Reason, terraformNote(*old, "writes its pause back"))
		return ExitRefused
	}
	if _, err := reg.WritePause(ctx, p, index); err != nil {
		return c.consulError(e, writeAdvice(err, reg.Key(lockmodel.KindPauses, c.lock)))
	}
	fmt.Fprintf(e.stdout, "paused lock %s by %s: %s\nnew runs do not start; a command already running is left to finish (end it with consullock release). Resume with: consullock resume -lock %s\n", c.lock, actor(p.By, p.Accessor), c.reason, c.lock)
	return ExitOK
}

// Resume deletes the lock's pause record.
func Resume(ctx context.Context, args []string, e env) int {
	var c common
	fs := newFlags("resume -lock NAME [-force]", "Resumes a paused lock: deletes <registry-prefix>/pauses/NAME, so the next trigger runs, and prints who resumed it (-by and the token's accessor ID). Exits 1 if the lock is not paused. A pause that consullock_lock.paused wrote is Terraform's: resume refuses it without -force, since the next apply pauses the lock again.", e, &c, false)
	force := fs.Bool("force", false, "resume a pause that Terraform (consullock_lock.paused) wrote; the next apply pauses the lock again")
	if code := c.parse(fs, args, &e, false); code >= 0 {
		return code
	}
	client, _, _, code := c.connect(ctx, e)
	if code >= 0 {
		return code
	}
	reg := store.New(client).Registry(c.registry)
	old, index, err := reg.ReadPause(ctx, c.lock)
	if err != nil && !isBadRecord(err) {
		return c.consulError(e, err)
	}
	if old == nil && index == 0 {
		fmt.Fprintf(e.stderr, "consullock resume: lock %s is not paused; nothing was changed\n", c.lock)
		return ExitRefused
	}
	if old != nil && old.By == record.PausedByTerraform && !*force {
		fmt.Fprintf(e.stderr, "consullock resume: lock %s is paused by Terraform (consullock_lock.paused = %q) since %s; nothing was changed. "+
			"Remove paused from the configuration and apply; -force resumes it now, but the next apply pauses it again\n", c.lock, old.Reason, old.At.Format(time.RFC3339))
		return ExitRefused
	}
	if err := reg.DeletePause(ctx, c.lock, index); err != nil {
		return c.consulError(e, writeAdvice(err, reg.Key(lockmodel.KindPauses, c.lock)))
	}
	by := actor(c.by, accessor(ctx, client))
	if old != nil {
		fmt.Fprintf(e.stdout, "resumed lock %s by %s (paused by %s since %s: %s)%s\n", c.lock, by, actor(old.By, old.Accessor), old.At.Format(time.RFC3339), old.Reason,
			terraformNote(*old, "pauses it again"))
	} else {
		fmt.Fprintf(e.stdout, "resumed lock %s by %s\n", c.lock, by)
	}
	return ExitOK
}

// terraformNote is the warning for a pause Terraform wrote, saying what
// its next apply does ("" for another pause).
func terraformNote(p record.Pause, does string) string {
	if p.By != record.PausedByTerraform {
		return ""
	}
	return "; this pause is consullock_lock.paused: the next apply " + does
}

// isBadRecord: the record exists but does not decode (not a Consul
// error): pause overwrites it, resume deletes it.
func isBadRecord(err error) bool {
	var ce *consul.Error
	return !errors.As(err, &ce)
}

// writeAdvice names the rule a denied write needs.
func writeAdvice(err error, key string) error {
	if errors.Is(err, consul.ErrPermissionDenied) {
		return fmt.Errorf("%w\nthis needs key write on %s: key %q { policy = \"write\" } (or a key_prefix covering it) in the token's policy", err, key, key)
	}
	return err
}
