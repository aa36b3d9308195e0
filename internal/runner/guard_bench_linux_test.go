package runner

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// BenchmarkKilledRunnerJobTree measures how long a job's tree outlives a
// kill that takes more than its command: from the kill to the last
// heartbeat of its processes (the tree job: a grandchild in the command's
// group and a setsid'd descendant, each beating every millisecond; at or
// below 0 when none beat after the kill) and to the guard's exit (seen
// through a pidfd), which comes after every process of the tree has been
// killed and reaped. p50 and p99 over b.N kills, for each kill:
//   - runner: SIGKILL of the runner alone;
//   - group: SIGKILL of the runner's process group (timeout -s KILL);
//   - runner_and_guard_pidns: SIGKILL of runner and guard together, with
//     -tree-protection pid-namespace (the kernel ends the tree).
//
// The next holder can start only once the session's TTL has expired and
// its lock-delay passed, seconds later.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench KilledRunnerJobTree -benchtime 60x ./internal/runner/
func BenchmarkKilledRunnerJobTree(b *testing.B) {
	for _, v := range []struct {
		name  string
		args  []string
		group bool
		kill  func(runner, guard int) error
	}{
		{"runner", nil, false, func(runner, _ int) error { return syscall.Kill(runner, syscall.SIGKILL) }},
		{"group", nil, true, func(runner, _ int) error { return syscall.Kill(-runner, syscall.SIGKILL) }},
		{"runner_and_guard_pidns", []string{"-tree-protection", ProtectionPIDNamespace}, false, func(runner, guard int) error {
			return errors.Join(syscall.Kill(runner, syscall.SIGKILL), syscall.Kill(guard, syscall.SIGKILL))
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			benchmarkKilledTree(b, v.args, v.group, v.kill)
		})
	}
}

func benchmarkKilledTree(b *testing.B, args []string, group bool, kill func(runner, guard int) error) {
	prefix := testenv.UniquePrefix(b.Name())
	// lock-delay 0: each kill's session is destroyed and the next runner
	// acquires at once.
	l := declare(b, lockmodel.Lock{Name: uniqueName(b, "lock"), Prefix: prefix}, fastProfile(b, 0))
	token := runnerToken(b, prefix)
	var lastBeat, reaped []time.Duration
	for b.Loop() {
		dir := b.TempDir()
		record := filepath.Join(dir, "record")
		job, beats := treeJob(dir, time.Millisecond, childArgs(record, "a", "-sleep", "5m")...)
		full := append(append(append([]string{"run", "-lock", l.Name}, args...), "--"), job...)
		a := startProcWith(b, "runner", processEnv(agent.Addr, token), &syscall.SysProcAttr{Setpgid: group, Pdeathsig: syscall.SIGKILL},
			runnerBin, full...)
		waitStarted(b, record, "a") // both heartbeats beat by then
		kids := directChildren(b, a.cmd.Process.Pid)
		if len(kids) != 1 {
			b.Fatalf("the runner has children %v, want its guard", kids)
		}
		guard := kids[0]

		exited, err := unix.PidfdOpen(guard, 0) // readable once the guard has exited
		if err != nil {
			b.Fatal(err)
		}
		killed := time.Now()
		if err := kill(a.cmd.Process.Pid, guard); err != nil {
			b.Fatal(err)
		}
		for {
			_, err := unix.Poll([]unix.PollFd{{Fd: int32(exited), Events: unix.POLLIN}}, -1)
			if err != unix.EINTR {
				if err != nil {
					b.Fatalf("wait for the guard %d: %v", guard, err)
				}
				break
			}
		}
		reaped = append(reaped, time.Since(killed))
		_ = unix.Close(exited)
		a.wait(10 * time.Second)
		last := time.Time{}
		for _, f := range beats {
			bs := readBeats(b, f)
			if len(bs) == 0 {
				b.Fatalf("%s has no heartbeat", f)
			}
			if at := bs[len(bs)-1].at; at.After(last) {
				last = at
			}
		}
		lastBeat = append(lastBeat, last.Sub(killed))
		for _, s := range sessionsNamed(b, "consullock run "+l.Name) {
			if _, err := agent.Client().Session().Destroy(s.ID, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	slices.Sort(lastBeat)
	slices.Sort(reaped)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(quantile(lastBeat, 0.5)), "last_beat_p50_ms")
	b.ReportMetric(ms(quantile(lastBeat, 0.99)), "last_beat_p99_ms")
	b.ReportMetric(ms(quantile(reaped, 0.5)), "all_reaped_p50_ms")
	b.ReportMetric(ms(quantile(reaped, 0.99)), "all_reaped_p99_ms")
	b.Logf("MEASURED %s: kill -> last heartbeat of its job tree over %d kills: p50 %s, p99 %s, max %s; "+
		"-> the tree reaped (the guard exited): p50 %s, p99 %s, max %s",
		b.Name(), len(lastBeat), quantile(lastBeat, 0.5).Round(time.Microsecond), quantile(lastBeat, 0.99).Round(time.Microsecond),
		lastBeat[len(lastBeat)-1].Round(time.Microsecond), quantile(reaped, 0.5).Round(time.Microsecond),
		quantile(reaped, 0.99).Round(time.Microsecond), reaped[len(reaped)-1].Round(time.Microsecond))
	round := func(ds []time.Duration) []time.Duration {
		out := make([]time.Duration, len(ds))
		for i, d := range ds {
			out[i] = d.Round(100 * time.Microsecond)
		}
		return out
	}
	b.Logf("MEASURED last heartbeat, sorted: %v", round(lastBeat))
	b.Logf("MEASURED tree reaped, sorted: %v", round(reaped))
}

// BenchmarkTreeProtectionStart measures what the tree protection costs a
// run: the time from the runner's exec to its command's start on a free
// lock (session, acquisition, the guard's start of the command), for
// -tree-protection guard and pid-namespace, and for the binary named by
// BENCH_BASE_RUNNER (built at the base commit) when set, in turn in one
// loop; medians and p99 over b.N runs each. The hand-over's figure for
// pid-namespace is BenchmarkHandover's run_pidns.
//
//	CONSUL_BIN=$PWD/bin/consul go test -run '^$' -bench TreeProtectionStart -benchtime 30x ./internal/runner/
func BenchmarkTreeProtectionStart(b *testing.B) {
	type variant struct {
		metric string
		bin    string
		args   []string
	}
	vs := []variant{
		{"guard", runnerBin, []string{"-tree-protection", ProtectionGuard}},
		{"pidns", runnerBin, []string{"-tree-protection", ProtectionPIDNamespace}},
	}
	if base := os.Getenv("BENCH_BASE_RUNNER"); base != "" {
		vs = append(vs, variant{"base", base, nil})
	}
	prefix := testenv.UniquePrefix(b.Name())
	l := declare(b, lockmodel.Lock{Name: uniqueName(b, "lock"), Prefix: prefix}, fastProfile(b, 0))
	token := runnerToken(b, prefix)
	took := make([][]time.Duration, len(vs))
	for b.Loop() {
		for i, v := range vs {
			record := filepath.Join(b.TempDir(), "record")
			started := time.Now()
			p := startRunnerBin(b, v.bin, "runner "+v.metric, agent.Addr, token, append([]string{"-lock", l.Name}, v.args...),
				childArgs(record, "a", "-sleep", "1ms")...)
			if code := p.wait(time.Minute); code != 0 {
				b.Fatalf("%s exited %d:\n%s", v.metric, code, p.out.String())
			}
			runs := readRuns(b, record)
			if len(runs) != 1 {
				b.Fatalf("%s: runs = %+v", v.metric, runs)
			}
			took[i] = append(took[i], runs[0].start.Sub(started))
		}
	}
	b.ReportMetric(0, "ns/op")
	for i, v := range vs {
		sorted := slices.Clone(took[i])
		slices.Sort(sorted)
		p99 := sorted[(len(sorted)*99+99)/100-1]
		b.ReportMetric(ms(median(took[i])), v.metric+"_start_ms")
		b.ReportMetric(ms(p99), v.metric+"_start_p99_ms")
		b.Logf("MEASURED %s start (exec to command): median %.2fms, p99 %.2fms of %d", v.metric, ms(median(took[i])), ms(p99), len(sorted))
	}
}
