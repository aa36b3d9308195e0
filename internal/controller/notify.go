package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/consullock/terraform-provider-consullock/internal/ledger"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/record"
)

// Notifications (-notify URL): a JSON POST for each event that needs a
// person, for teams without Prometheus. The leading replica finds the
// events in what the registry watch saw (the declarations, the run
// ledgers and the pause records) and sends each once: the IDs it sent are
// kept in Consul under <registry>/controller/notified/<lock> (the
// controller's own prefix), so a replica that takes over does not send
// them again. A POST whose answer was lost, or a leader that stopped
// between the POST and that write, may send one twice: receivers
// deduplicate on the event's id. Sending runs apart from reconciliation
// and never blocks it.

// Event kinds (NotifyEvent.Event).
const (
	NotifyMissed      = "missed"          // a slot passed its starting deadline with no run
	NotifyExhausted   = "exhausted"       // a run used up max_attempts without a success
	NotifyPausedLong  = "paused_too_long" // a pause older than -notify-paused-after
	notifyKeepPerLock = 200               // event IDs kept per lock
)

// DefaultNotifyPausedAfter is -notify-paused-after's default, the
// shipped ConsulLockPausedTooLong rule's threshold.
const DefaultNotifyPausedAfter = 24 * time.Hour

// notifyEvery is how often the leader looks for events besides each
// registry answer (missed slots come with time, not with writes).
const notifyEvery = 15 * time.Second

// NotifyConfig is where and when to notify; URL "" is off.
type NotifyConfig struct {
	URL         string
	PausedAfter time.Duration
}

// validate checks the URL and threshold, naming the flag.
func (n NotifyConfig) validate() error {
	if n.URL == "" {
		return nil
	}
	u, err := url.Parse(n.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-notify %q: want an http:// or https:// URL", n.URL)
	}
	if n.PausedAfter <= 0 {
		return fmt.Errorf("-notify-paused-after %s: want a positive duration", n.PausedAfter)
	}
	return nil
}

// NotifyEvent is the JSON body of a notification. It carries no link and
// no secret.
type NotifyEvent struct {
	ID    string `json:"id"`    // stable: the same event has the same id
	Event string `json:"event"` // NotifyMissed, NotifyExhausted, NotifyPausedLong
	Lock  string `json:"lock"`
	RunID string `json:"run_id,omitempty"`
	// Outcome is the run's (missed, exhausted) or "paused".
	Outcome string `json:"outcome"`
	// Reason: the last attempt's outcome and reason (exhausted), the
	// pause's reason (paused_too_long).
	Reason string `json:"reason,omitempty"`
	Node   string `json:"node,omitempty"` // the last attempt's node
	By     string `json:"by,omitempty"`   // who paused
	At     string `json:"at"`             // when it happened, RFC 3339
}

// NotifyEvents are the events in a registry answer at now, oldest first
// per lock: each missed slot of a run_once lock, each run that used up its
// attempts, each pause older than pausedAfter.
func NotifyEvents(locks map[string]lockmodel.Lock, ledgers map[string]ledger.Ledger, pauses map[string]record.Pause,
	now time.Time, pausedAfter time.Duration) []NotifyEvent {
	var out []NotifyEvent
	for name, l := range locks {
		if l.RunOnce == nil {
			continue
		}
		ro := l.RunOnce.WithDefaults()
		for _, id := range ro.MissedSlots(ledgers[name], now) {
			out = append(out, NotifyEvent{ID: NotifyMissed + ":" + name + ":" + id, Event: NotifyMissed, Lock: name, RunID: id,
				Outcome: NotifyMissed, Reason: "no run started before run_once.starting_deadline", At: id})
		}
		for _, r := range ledgers[name].Runs {
			if !r.Exhausted(ro.MaxAttempts) || len(r.Attempts) == 0 {
				continue
			}
			last := r.Attempts[len(r.Attempts)-1]
			reason := string(last.Outcome)
			if last.Reason != "" {
				reason += ": " + last.Reason
			}
			out = append(out, NotifyEvent{ID: NotifyExhausted + ":" + name + ":" + r.ID, Event: NotifyExhausted, Lock: name, RunID: r.ID,
				Outcome: string(ledger.RunExhausted), Reason: reason, Node: last.Node, At: last.Finished.UTC().Format(time.RFC3339)})
		}
	}
	for name, p := range pauses {
		if p.PausedFor(now) < pausedAfter {
			continue
		}
		at := p.At.UTC().Format(time.RFC3339)
		out = append(out, NotifyEvent{ID: NotifyPausedLong + ":" + name + ":" + at, Event: NotifyPausedLong, Lock: name,
			Outcome: "paused", Reason: p.Reason, By: p.By, At: at})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Lock != out[j].Lock {
			return out[i].Lock < out[j].Lock
		}
		return out[i].At < out[j].At
	})
	return out
}

// notifier sends the events the leader finds (notifyLoop).
type notifier struct {
	cfg  NotifyConfig
	post *retryablehttp.Client

	mu      sync.Mutex
	locks   map[string]lockmodel.Lock
	ledgers map[string]ledger.Ledger
	pauses  map[string]record.Pause
	wake    chan struct{}
}

func newNotifier(cfg NotifyConfig) *notifier {
	rc := retryablehttp.NewClient()
	rc.RetryMax, rc.RetryWaitMin, rc.RetryWaitMax = 4, 500*time.Millisecond, 10*time.Second
	rc.HTTPClient.Timeout = 10 * time.Second
	rc.Logger = nil
	return &notifier{cfg: cfg, post: rc, wake: make(chan struct{}, 1)}
}

// observe takes one registry answer (the maps are replaced, never
// changed in place) and wakes the loop.
func (n *notifier) observe(locks map[string]lockmodel.Lock, ledgers map[string]ledger.Ledger, pauses map[string]record.Pause) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.locks, n.ledgers, n.pauses = locks, ledgers, pauses
	n.mu.Unlock()
	n.wakeUp()
}

// wakeUp has the loop look for events soon; it never blocks (nil: no
// notifier).
func (n *notifier) wakeUp() {
	if n == nil {
		return
	}
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// notifyLoop looks for events after each registry answer and every
// notifyEvery, and sends them while this replica leads.
func (c *Controller) notifyLoop(ctx context.Context) {
	n := c.notify
	tick := time.NewTicker(notifyEvery)
	defer tick.Stop()
	// sent is what this term has read and written of each lock's record
	// of sent events: read once a term, so that a pass whose events were
	// all sent sends no request; reset when leadership is lost.
	var sent map[string]*sentRecord
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-tick.C:
		}
		if !c.IsLeader() {
			sent = nil
			continue
		}
		if sent == nil {
			sent = map[string]*sentRecord{}
		}
		n.mu.Lock()
		locks, ledgers, pauses := n.locks, n.ledgers, n.pauses
		n.mu.Unlock()
		events := NotifyEvents(locks, ledgers, pauses, c.cfg.Clock.Now(), n.cfg.PausedAfter)
		for i := 0; i < len(events); {
			j := i
			for j < len(events) && events[j].Lock == events[i].Lock {
				j++
			}
			c.notifyLock(ctx, events[i].Lock, events[i:j], sent)
			i = j
		}
	}
}

// notifiedKey keeps the IDs of the events sent about lock.
func (c *Controller) notifiedKey(lock string) string {
	return c.cfg.RegistryPrefix + "/controller/notified/" + lock
}

// sentRecord is a lock's record of sent event IDs as last read or
// written, at its ModifyIndex.
type sentRecord struct {
	ids   []string
	index uint64
}

// readSent reads lock's record of sent events consistently.
func (c *Controller) readSent(ctx context.Context, key string, log *slog.Logger) (*sentRecord, error) {
	pair, _, err := c.client.KV().Get(key, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil || pair == nil {
		return &sentRecord{}, err
	}
	r := &sentRecord{index: pair.ModifyIndex}
	if err := json.Unmarshal(pair.Value, &r.ids); err != nil {
		log.Warn("the record of sent notifications does not decode; starting it again", "error", err.Error())
		r.ids = nil
	}
	return r, nil
}

// notifyLock sends lock's events not yet sent and records them sent
// (known, the term's copies of the records); a POST that fails after its
// retries is logged and tried at the next pass.
func (c *Controller) notifyLock(ctx context.Context, lock string, events []NotifyEvent, known map[string]*sentRecord) {
	key := c.notifiedKey(lock)
	log := c.log.With("lock", lock, "notify_key", key)
	rec := known[lock]
	if rec == nil {
		var err error
		if rec, err = c.readSent(ctx, key, log); err != nil {
			log.Warn("cannot read which notifications were sent; trying again later", "error", err.Error())
			return
		}
		known[lock] = rec
	}
	sent := rec.ids
	fresh := false
	for _, e := range events {
		if slices.Contains(sent, e.ID) || !c.IsLeader() {
			continue
		}
		if err := c.notify.send(ctx, e); err != nil {
			log.Warn("notification not delivered; trying again at the next pass", "event", e.Event, "run_id", e.RunID, "error", err.Error())
			break // in order: the next pass starts with this one
		}
		log.Info("notification sent", "event", e.Event, "run_id", e.RunID, "id", e.ID)
		sent, fresh = append(sent, e.ID), true
	}
	if !fresh {
		log.Debug("notifications: every event already sent", "events", len(events))
		return
	}
	if len(sent) > notifyKeepPerLock {
		sent = sent[len(sent)-notifyKeepPerLock:]
	}
	b, _ := json.Marshal(sent)
	// Read again at the next pass: the write's answer does not give the
	// record's new index.
	delete(known, lock)
	ok, _, err := c.client.KV().CAS(&api.KVPair{Key: key, Value: b, ModifyIndex: rec.index}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil || !ok {
		log.Warn("cannot record the notifications sent; a replica may send them again", "error", fmt.Sprint(err), "changed", !ok)
	}
}

// send POSTs e as JSON, retried with back-off (go-retryablehttp); a 2xx
// answer is delivered.
func (n *notifier) send(ctx context.Context, e NotifyEvent) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.post.Do(req)
	if err != nil {
		return redactURL(err, n.cfg.URL)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return nil
}

// redactURL keeps a URL's user info and query (which may hold a token)
// out of an error.
func redactURL(err error, raw string) error {
	safe := "the -notify URL"
	if u, perr := url.Parse(raw); perr == nil {
		u.User, u.RawQuery, u.Fragment = nil, "", ""
		safe = u.String()
	}
	return errors.New(strings.ReplaceAll(err.Error(), raw, safe))
}
