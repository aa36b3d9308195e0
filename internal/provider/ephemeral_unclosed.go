package provider

import (
	"context"
	"sync"
	"time"
)

// OpenTofu (1.12) skips an ephemeral resource's Close when a resource that
// uses it failed or the run was interrupted: the close node is downstream
// of the failed one. The ephemeral resources here record what each Open
// created until Close runs, and CloseUnclosed ends the rest when the CLI
// shuts the provider down, so that a lock is not held, and a token not
// valid, until Consul expires them.
var unclosed = struct {
	sync.Mutex
	m map[string]func(context.Context)
}{m: map[string]func(context.Context){}}

// trackUnclosed records cleanup for what Open created under id.
func trackUnclosed(id string, cleanup func(context.Context)) {
	unclosed.Lock()
	defer unclosed.Unlock()
	unclosed.m[id] = cleanup
}

// closed forgets id: Close ran.
func closed(id string) {
	unclosed.Lock()
	defer unclosed.Unlock()
	delete(unclosed.m, id)
}

// CloseUnclosed runs, concurrently and within timeout, the cleanup of
// everything this process opened and nobody closed. The provider's main
// calls it when the CLI has shut the provider down; the CLI kills a
// provider that has not exited 2s after asking it to.
func CloseUnclosed(timeout time.Duration) {
	unclosed.Lock()
	cleanups := unclosed.m
	unclosed.m = map[string]func(context.Context){}
	unclosed.Unlock()
	if len(cleanups) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, cleanup := range cleanups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cleanup(ctx)
		}()
	}
	wg.Wait()
}
