// Command go-library is a Go service that runs a job once per cron slot
// while three (or any number of) replicas of it run the same schedule: each
// replica's robfig/cron fires, every replica calls RunOnce.Do with the
// slot's time as the run ID, and the job runs on one of them. A replica
// that dies mid-job is recorded crashed by the next holder, which runs the
// job again as attempt 2; a run that succeeded anywhere is not run again.
//
// Declare the lock (consullock_lock with run_once, see main.tf), then on
// each replica:
//
//	CONSUL_HTTP_ADDR=... CONSUL_HTTP_TOKEN=<worker token> go run . -lock nightly-report -schedule '*/5 * * * *'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/robfig/cron/v3"

	"github.com/consullock/terraform-provider-consullock/concurrency"
)

func main() {
	lock := flag.String("lock", "nightly-report", "the declared run-once lock")
	schedule := flag.String("schedule", "*/5 * * * *", "5-field cron schedule in UTC; the same as the lock's run_once.schedule")
	registry := flag.String("registry-prefix", "consul-lock", "the provider's registry_prefix")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	client, err := api.NewClient(api.DefaultConfig()) // CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, ...
	if err != nil {
		log.Error("consul client", "error", err.Error())
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	job := concurrency.NewRunOnce(client, *lock, concurrency.WithRegistryPrefix(*registry), concurrency.WithLogger(log))
	c := cron.New(cron.WithLocation(time.UTC))
	if _, err := c.AddFunc(*schedule, func() { runSlot(ctx, log, job, client, *lock, slotID(time.Now())) }); err != nil {
		log.Error("schedule", "error", err.Error())
		os.Exit(2)
	}
	c.Start()
	<-ctx.Done()
	<-c.Stop().Done() // a job in flight sees ctx cancelled; its outcome is still recorded
}

// slotID is the run ID of the slot firing at now: its minute in UTC, the
// same on every replica whose clock is within the minute. For a lock with
// run_once.schedule the library checks that it is a slot of the schedule.
func slotID(now time.Time) string {
	return now.UTC().Truncate(time.Minute).Format(time.RFC3339)
}

// runSlot runs the job for one slot and logs what happened to it here.
func runSlot(ctx context.Context, log *slog.Logger, job *concurrency.RunOnce, client *api.Client, lock, runID string) {
	err := job.Do(ctx, runID, func(ctx context.Context, a concurrency.Attempt) error {
		return report(ctx, client, "jobs/"+lock+"/last-result", a)
	})
	switch {
	case err == nil:
		log.Info("ran the slot here", "run_id", runID)
	case errors.Is(err, concurrency.ErrAlreadySucceeded):
		log.Info("another replica ran the slot", "run_id", runID)
	case errors.Is(err, concurrency.ErrExhausted), errors.Is(err, concurrency.ErrPaused), errors.Is(err, concurrency.ErrSkipped):
		log.Warn("the slot is not run", "run_id", runID, "why", err.Error())
	default:
		log.Error("the slot's attempt failed; a later trigger retries it while attempts remain", "run_id", runID, "error", err.Error())
	}
}

// report is the job. It stops when ctx is cancelled (the lock was lost,
// or max_runtime passed) and writes its result fenced: the transaction
// commits only while this attempt still holds the lock.
func report(ctx context.Context, client *api.Client, key string, a concurrency.Attempt) error {
	select {
	case <-time.After(2 * time.Second): // the work
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	result := fmt.Sprintf("run %s, attempt %d, fencing token %d", a.RunID, a.Number, a.FencingToken)
	ok, resp, _, err := client.Txn().Txn(api.TxnOps{
		a.IsOwner(),
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: []byte(result)}},
	}, (&api.QueryOptions{}).WithContext(ctx))
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("fenced write refused: %v", resp.Errors)
	}
	return nil
}
