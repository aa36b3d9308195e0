// Command handoverfloor is the floor of a clean hand-over in
// BenchmarkHandover: the steps of `consullock run` done by a bare program
// with the api package and nothing else. It creates a session (the
// profile of `consul lock`: TTL 15s, lock-delay 15s), waits on the key
// with blocking queries until it is free, acquires it with a KV
// transaction "lock" op (whose answer carries the fencing token), starts
// the command, waits for it, releases the key and destroys the session.
// No renewals (the benchmark's commands run far shorter than the TTL), no
// declaration, no loss detection, no logging.
//
//	handoverfloor -key KEY -- command args...
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/hashicorp/consul/api"
)

// lockFlags are api.Lock's flags (lockmodel.LockFlagValue).
const lockFlags = 0x2ddccbc058a50c18

func main() {
	key := flag.String("key", "", "the lock key")
	flag.Parse()
	if err := run(*key, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "handoverfloor:", err)
		os.Exit(1)
	}
}

func run(key string, argv []string) error {
	c, err := api.NewClient(api.DefaultConfig())
	if err != nil {
		return err
	}
	id, _, err := c.Session().Create(&api.SessionEntry{Name: "handover floor " + key, TTL: "15s", LockDelay: 15e9, Behavior: api.SessionBehaviorRelease}, nil)
	if err != nil {
		return err
	}
	defer func() { _, _ = c.Session().Destroy(id, nil) }()
	var index uint64
	for {
		pair, meta, err := c.KV().Get(key, &api.QueryOptions{WaitIndex: index})
		if err != nil {
			return err
		}
		index = meta.LastIndex
		if pair != nil && pair.Session != "" {
			continue
		}
		ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVLock, Key: key, Flags: lockFlags, Session: id}}}
		ok, resp, _, err := c.Txn().Txn(ops, nil)
		if err != nil {
			return err
		}
		if !ok {
			continue // another was first, or a lock-delay: wait again
		}
		entry := resp.Results[0].KV
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "CONSUL_LOCK_HELD=true", "CONSUL_LOCK_FENCING_TOKEN="+strconv.FormatUint(entry.ModifyIndex, 10))
		runErr := cmd.Run()
		if _, _, err := c.KV().Release(&api.KVPair{Key: key, Session: id, Flags: lockFlags}, nil); err != nil {
			return err
		}
		return runErr
	}
}
