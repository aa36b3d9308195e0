package faults

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// FaultClockSkew runs a process with its wall clock moved by Value
// seconds (lockmodel.EnvClockOffset) for For: a controller replica
// restarted skewed (Target controller-N), or runners on client node N
// (Target runner-N: an extra mutex runner, and the run-once runners
// started there meanwhile).
const FaultClockSkew FaultKind = "clock-skew"

type clockSkew struct{}

func (clockSkew) Spec() FaultSpec { return FaultSpec{Name: FaultClockSkew, Weight: 2, Group: "skews"} }

// Draw: skews last longer than other faults (up to 3 x MaxFor): max_hold
// and the hold's start are judged over seconds. A replica restarted
// skewed keeps the controllers busy: no kill of a replica meanwhile.
func (clockSkew) Draw(sc *scheduler, s *Step) {
	cfg := sc.cfg
	s.For = sc.between(cfg.MinFor, 3*cfg.MaxFor)
	skew := sc.between(cfg.MinSkew, cfg.MaxSkew).Round(time.Second)
	if sc.intN(2) == 1 {
		skew = -skew
	}
	s.Value = int(skew / time.Second)
	if sc.free("controllers", s.At) && sc.intN(2) == 1 {
		s.Target = sc.controller()
		sc.occupyUntil("controllers", s.At+s.For+cfg.MinGap)
	} else {
		s.Target = fmt.Sprintf("runner-%d", 1+sc.intN(cfg.Clients))
	}
}

func (clockSkew) formatValue(v int) string { return fmt.Sprintf("offset %+ds", v) }

func (clockSkew) Inject(n *nemesis, sh shot) (func(), bool) { return n.skewClock(sh.s), true }

// skewWindow is a clock skew's span (to: zero while in force).
type skewWindow struct {
	target   string
	from, to time.Time
}

// skewEnv is the clock offset of a runner started on node now.
func (n *nemesis) skewEnv(node string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d, ok := n.skews[node]; ok {
		return []string{fmt.Sprintf("%s=%s", lockmodel.EnvClockOffset, d)}
	}
	return nil
}

// skewClock moves a clock by the step's offset until undone: a controller
// replica restarted with it (killed, as by controller-kill), or the runners
// started on a client node meanwhile (an extra mutex runner, and the
// run-once runners started there).
func (n *nemesis) skewClock(s Step) func() {
	offset := time.Duration(s.Value) * time.Second
	n.mu.Lock()
	w := len(n.skewWindows)
	n.skewWindows = append(n.skewWindows, skewWindow{target: s.Target, from: time.Now()})
	n.mu.Unlock()
	ended := func() {
		n.mu.Lock()
		n.skewWindows[w].to = time.Now()
		n.mu.Unlock()
	}
	if strings.HasPrefix(s.Target, "controller-") {
		r := n.replicas[replicaIndex(s.Target)]
		restart := func(env []string) {
			n.killed(r, r.kill())
			r.mu.Lock()
			r.env = env
			r.mu.Unlock()
			if err := r.start(); err != nil {
				n.errorf("restarting %s: %v", r.name, err)
			}
		}
		n.markAll(fmt.Sprintf("nemesis: %s restarted with its clock moved by %s", r.name, offset))
		restart([]string{fmt.Sprintf("%s=%s", lockmodel.EnvClockOffset, offset)})
		return func() {
			n.markAll(fmt.Sprintf("nemesis: %s restarted with its clock right", r.name))
			restart(nil)
			ended()
		}
	}
	i, _ := strconv.Atoi(strings.TrimPrefix(s.Target, "runner-"))
	node := n.cluster.Clients[(max(i, 1)-1)%len(n.cluster.Clients)]
	n.markAll(fmt.Sprintf("nemesis: runners on %s start with their clock moved by %s", node.Name, offset))
	n.mu.Lock()
	n.skews[node.Name] = offset
	n.mu.Unlock()
	runner := n.startSkewedRunner(node, offset)
	return func() {
		n.mu.Lock()
		delete(n.skews, node.Name)
		n.mu.Unlock()
		runner.stop()
		ended()
	}
}
