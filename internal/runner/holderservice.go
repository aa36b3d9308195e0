package runner

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"
)

// holderService keeps the holder's service instance (the lock's
// holder_service) on the local agent while, and only while, the lock is
// held: registered when the command starts, its TTL check passed after
// every renewal Consul answered (when lockmodel.HolderCheck.PassAllowed:
// the check then expires before anyone else could acquire), withdrawn at
// once when the lock is lost, and deregistered before the release on every
// exit. It is nil for a lock without holder_service, and every method is a
// no-op on nil: such a lock costs no request more.
//
// States (one goroutine, started by start, owns the instance):
//
//	start: register (critical), pass ──▶ registered ── renewed: pass the check (if allowed)
//	   │ failed: log          │ withdraw (lost, or exit): deregister
//	   ▼                      ▼
//	  done                  done (wait returns)
type holderService struct {
	r       *runner
	spec    lockmodel.HolderService
	check   lockmodel.HolderCheck
	renewed chan time.Time // the latest answered renewal's send time
	stop    chan struct{}  // closed by withdraw
	done    chan struct{}  // closed when the instance is deregistered (or never was)
	once    sync.Once
	started bool
}

// newHolderService is the lock's holder service, nil without one.
func newHolderService(r *runner) *holderService {
	if r.lock.HolderService == nil {
		return nil
	}
	hs := &holderService{r: r, spec: *r.lock.HolderService, check: lockmodel.NewHolderCheck(r.profile),
		renewed: make(chan time.Time, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, w := range hs.check.Warnings() {
		r.log.Warn(w.Summary, "detail", w.Detail)
	}
	return hs
}

// start registers the holder's instance and keeps it in a goroutine that
// wait (or withdraw) ends. Called once, by the supervisor.
func (hs *holderService) start(h *lockproto.Hold) {
	if hs == nil {
		return
	}
	hs.started = true
	holder := lockmodel.Holder{Lock: hs.r.lock.Name, Session: h.Session.ID, FencingToken: h.Grant.FencingToken, Node: h.Session.Node, PID: os.Getpid()}
	in := hs.spec.Instance(holder, hs.check, hs.r.cfg.serviceAddress, hs.r.cfg.servicePort)
	go hs.keep(in, h)
}

// onRenewed hands the send time of a renewal Consul answered to the
// instance's goroutine; it never blocks (the hold's judge calls it).
func (hs *holderService) onRenewed(at time.Time) {
	if hs == nil {
		return
	}
	select {
	case hs.renewed <- at:
	default:
		select { // replace an unread older time
		case <-hs.renewed:
		default:
		}
		select {
		case hs.renewed <- at:
		default:
		}
	}
}

// withdraw stops passing the check and deregisters the instance, without
// waiting (the lock is lost: the command is being stopped meanwhile).
func (hs *holderService) withdraw() {
	if hs == nil {
		return
	}
	hs.once.Do(func() { close(hs.stop) })
}

// wait withdraws the instance and returns once it is deregistered: the
// supervisor calls it before the lock is released.
func (hs *holderService) wait() {
	if hs == nil || !hs.started {
		return
	}
	hs.withdraw()
	<-hs.done
}

// keep registers the instance critical, whatever the registration's
// latency, and passes its check at once on the hold's last confirmed
// contact (when PassAllowed), then after each renewal; on withdraw it
// deregisters.
func (hs *holderService) keep(in lockmodel.HolderInstance, h *lockproto.Hold) {
	defer close(hs.done)
	log, c := hs.r.log.With("service_id", in.ID), hs.r.client
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-hs.stop:
			cancel()
		case <-hs.done:
		}
	}()
	defer cancel()
	start := time.Now()
	if err := c.RegisterHolderService(ctx, in); err != nil {
		if ctx.Err() == nil {
			log.Error("cannot register the holder service; the lock is held without it", "service", in.Name, "error", err.Error())
			return
		}
	} else {
		hs.pass(ctx, in.CheckID, h.LastContact())
		log.Info("holder service registered", "service", in.Name, "check_ttl", lockmodel.FormatDuration(in.Check.TTL),
			"took", time.Since(start).Round(time.Millisecond))
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case at := <-hs.renewed:
			hs.pass(ctx, in.CheckID, at)
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), lockproto.CleanupTimeout)
	defer dcancel()
	if err := c.DeregisterHolderService(dctx, in.ID); err != nil {
		log.Warn("cannot deregister the holder service; its check goes critical and the agent removes it",
			"check_ttl", lockmodel.FormatDuration(in.Check.TTL), "error", err.Error())
		return
	}
	log.Info("holder service deregistered", "service", in.Name)
}

// pass passes the check after the renewal sent at at, unless that renewal
// is already too old for the check to expire before a take-over.
func (hs *holderService) pass(ctx context.Context, checkID string, at time.Time) {
	if !hs.check.PassAllowed(time.Since(at)) {
		hs.r.log.Debug("holder check not passed: the renewal is too old", "renewed", at.Format(time.RFC3339Nano))
		return
	}
	pctx, cancel := context.WithTimeout(ctx, hs.check.PassTimeout)
	defer cancel()
	if err := hs.r.client.PassHolderCheck(pctx, checkID); err != nil && ctx.Err() == nil {
		hs.r.log.Warn("cannot pass the holder check; DNS drops this holder when it expires", "error", err.Error())
	}
}
