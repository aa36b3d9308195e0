package runner

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/libhold"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/lockproto"

	"github.com/consullock/terraform-provider-consullock/internal/store"
)

// holderService keeps the holder's service instance (the lock's
// holder_service) on the local agent while, and only while, the lock is
// held: registered when the command starts, its TTL check passed after
// every renewal Consul answered (when holdersvc.Check.PassAllowed:
// the check then expires before anyone else could acquire), withdrawn at
// once when the lock is lost, and deregistered before the release on every
// exit. It is nil for a lock without holder_service, and every method is a
// no-op on nil: such a lock costs no request more.
//
// Agentless (catalogNode set: holdersvc.ViaCatalog) the instance is
// registered on the session's node in the catalog, passing, and nobody
// runs its check: renewals pass nothing, and before the command starts
// reap deregisters the instances that former holders of the lock left
// behind on any node (killed, or cut off from the servers), so that DNS
// never names a former holder once this one's command runs.
//
// States (one goroutine, started by start, owns the instance):
//
//	start: register (critical), pass ──▶ registered ── renewed: pass the check (if allowed)
//	   │ failed: log          │ withdraw (lost, or exit): deregister
//	   ▼                      ▼
//	  done                  done (wait returns)
type holderService struct {
	r       *runner
	spec    holdersvc.Service
	check   holdersvc.Check
	renewed chan time.Time // the latest answered renewal's send time
	stop    chan struct{}  // closed by withdraw
	done    chan struct{}  // closed when the instance is deregistered (or never was)
	once    sync.Once
	started bool
	// catalogNode is the node of a catalog registration, "" for the
	// agent's.
	catalogNode string
}

// checkHolderNode refuses a -node that is not a DNS label when the lock
// declares holder_service and the instance goes on -node (a catalog
// registration): SRV answers for the holder service name the node. It
// needs the declaration, so it runs in setup (exit 125), before any
// session or lock write; a lock without holder_service takes any -node,
// and so does -service-registration agent (the instance is then on the
// agent's node).
func (r *runner) checkHolderNode() error {
	if r.lock.HolderService == nil || r.cfg.serviceVia != holdersvc.ViaCatalog {
		return nil
	}
	if err := holdersvc.ValidateNode("-node", r.cfg.node); err != nil {
		return fmt.Errorf("lock %q declares holder_service %q, whose instance goes on -node: %w (-service-registration agent puts the instance on the agent's node instead)",
			r.lock.Name, r.lock.HolderService.Name, err)
	}
	return nil
}

// newHolderService is the lock's holder service, nil without one.
func newHolderService(r *runner) *holderService {
	if r.lock.HolderService == nil {
		return nil
	}
	hs := &holderService{r: r, spec: *r.lock.HolderService, check: lockmodel.NewHolderCheck(r.profile),
		renewed: make(chan time.Time, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if r.cfg.serviceVia == holdersvc.ViaCatalog {
		hs.catalogNode = r.cfg.node
	}
	r.log.Info("holder service registration", "service", hs.spec.Name, "via", r.cfg.serviceVia, "node", r.cfg.node, "reason", r.cfg.serviceViaReason)
	for _, w := range hs.check.Warnings() {
		if hs.catalogNode == "" { // a catalog check has no TTL
			r.log.Warn(w.Summary, "detail", w.Detail)
		}
	}
	return hs
}

// start registers the holder's instance and keeps it in a goroutine that
// wait (or withdraw) ends. Called once, by the supervisor.
func (hs *holderService) start(h libhold.Held) {
	if hs == nil {
		return
	}
	hs.started = true
	holder := holdersvc.Identity{Lock: hs.r.lock.Name, Session: h.Session().ID, FencingToken: h.Grant().FencingToken, Node: h.Session().Node, PID: os.Getpid()}
	in := hs.spec.Instance(holder, hs.check, hs.r.cfg.serviceAddress, hs.r.cfg.servicePort)
	go hs.keep(in, h)
}

// reap deregisters, before the command starts, the instances that the
// lock's former holders left in DNS on any node
// (consul.StaleHolderInstances): a killed agentless holder's, on its own
// -node, which no agent takes out of DNS. A failure is logged and the
// command starts: the lock is held, only DNS may still name a former
// holder (when the token cannot read a node, the instances it could see
// are deregistered all the same). Agent registrations need none: the
// agent's TTL check, or its node's serfHealth, took theirs out of DNS
// before this holder could acquire.
func (hs *holderService) reap(h libhold.Held) {
	if hs == nil || hs.catalogNode == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockproto.CleanupTimeout)
	defer cancel()
	log, c, start := hs.r.log, hs.r.client, time.Now()
	stale, err := store.New(c).StaleHolderInstances(ctx, hs.spec.Name, hs.r.lock.Name, hs.r.lock.Limit, h.Session().ID)
	if err != nil {
		log.Error("cannot list every former holder's instance; DNS may name a former holder", "error", err.Error())
	}
	for _, in := range stale {
		if err := store.New(c).DeregisterHolderServiceCatalog(ctx, in.Node, in.ID); err != nil {
			log.Error("cannot deregister a former holder's instance; DNS may name it", "service_id", in.ID, "node", in.Node, "error", err.Error())
			continue
		}
		log.Info("former holder's instance deregistered", "service_id", in.ID, "node", in.Node, "took", time.Since(start).Round(time.Millisecond))
	}
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
func (hs *holderService) keep(in holdersvc.Instance, h libhold.Held) {
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
	if hs.catalogNode != "" {
		hs.keepInCatalog(ctx, log, in)
		return
	}
	if err := store.New(c).RegisterHolderService(ctx, in); err != nil {
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
	if err := store.New(c).DeregisterHolderService(dctx, in.ID); err != nil {
		log.Warn("cannot deregister the holder service; its check goes critical and the agent removes it",
			"check_ttl", lockmodel.FormatDuration(in.Check.TTL), "error", err.Error())
		return
	}
	log.Info("holder service deregistered", "service", in.Name)
}

// keepInCatalog registers in on the catalog node, passing, and
// deregisters it on withdraw. Renewals pass nothing: no agent runs the
// check.
func (hs *holderService) keepInCatalog(ctx context.Context, log *slog.Logger, in holdersvc.Instance) {
	c, start, node := hs.r.client, time.Now(), hs.catalogNode
	err := store.New(c).RegisterHolderServiceCatalog(ctx, node, in)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Error("cannot register the holder service; the lock is held without it", "service", in.Name, "node", node, "error", err.Error())
		return
	case err == nil:
		log.Info("holder service registered", "service", in.Name, "node", node, "via", holdersvc.ViaCatalog,
			"took", time.Since(start).Round(time.Millisecond))
	}
	<-ctx.Done() // withdrawn (a registration cut short by it may have landed)
	dctx, dcancel := context.WithTimeout(context.Background(), lockproto.CleanupTimeout)
	defer dcancel()
	if err := store.New(c).DeregisterHolderServiceCatalog(dctx, node, in.ID); err != nil {
		log.Warn("cannot deregister the holder service; the next holder deregisters it before its command starts",
			"node", node, "error", err.Error())
		return
	}
	log.Info("holder service deregistered", "service", in.Name, "node", node)
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
	if err := store.New(hs.r.client).PassHolderCheck(pctx, checkID); err != nil && ctx.Err() == nil {
		hs.r.log.Warn("cannot pass the holder check; DNS drops this holder when it expires", "error", err.Error())
	}
}
