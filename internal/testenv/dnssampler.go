package testenv

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"
)

// The DNS sampler of the holder service tests: real SRV queries for
// <service>.service.consul, sent to one DNS interface (Agent.DNSAddr with
// Options.DNS, a ClusterMember's DNSAddr with ClusterOptions.DNS) every
// 50 ms, each answer kept with the time its query was sent. The tests
// assert on ordering: an answer reflects the catalog at some moment after
// its query was sent, so no answer to a query sent after the next holder's
// command started may name a former holder.

// DNSSampleEvery is how often SampleDNS sends a query.
const DNSSampleEvery = 50 * time.Millisecond

// dnsQueryTimeout bounds one query of SampleDNS.
const dnsQueryTimeout = 2 * time.Second

// DNSResolver sends every query to the DNS interface at addr (host:port),
// whatever the system's resolver configuration says.
func DNSResolver(addr string) *net.Resolver {
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
}

// LookupPorts asks r for <service>.service.consul SRV and returns the
// ports answered, sorted; none when the name has no healthy instance
// (NXDOMAIN).
func LookupPorts(ctx context.Context, r *net.Resolver, service string) ([]int, error) {
	_, srvs, err := r.LookupSRV(ctx, "", "", service+".service.consul")
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ports := make([]int, 0, len(srvs))
	for _, s := range srvs {
		ports = append(ports, int(s.Port))
	}
	slices.Sort(ports)
	return ports, nil
}

// DNSSample is one DNS answer (the SRV ports, sorted) and when its query
// was sent.
type DNSSample struct {
	Sent  time.Time
	Ports []int
}

// DNSSamples are the answers of one SampleDNS, in the order their queries
// were sent.
type DNSSamples []DNSSample

// LastWith is the send time of the last answer naming port p (zero when
// none did).
func (s DNSSamples) LastWith(p int) (last time.Time) {
	for _, a := range s {
		if slices.Contains(a.Ports, p) {
			last = a.Sent
		}
	}
	return last
}

// FirstWith is the send time of the first answer naming port p (zero
// when none did).
func (s DNSSamples) FirstWith(p int) time.Time {
	for _, a := range s {
		if slices.Contains(a.Ports, p) {
			return a.Sent
		}
	}
	return time.Time{}
}

// SampleDNS queries service at r every DNSSampleEvery until stop, which
// returns the answers and the errors of the queries that failed (each
// query waits dnsQueryTimeout at most; one cut short by stop is neither).
func SampleDNS(r *net.Resolver, service string) (stop func() (DNSSamples, []error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		samples DNSSamples
		failed  []error
		done    = make(chan struct{}) // closed when the loop has ended: stop reads samples and failed after it
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(DNSSampleEvery)
		defer tick.Stop()
		for ctx.Err() == nil {
			sent := time.Now()
			qctx, qcancel := context.WithTimeout(ctx, dnsQueryTimeout)
			ports, err := LookupPorts(qctx, r, service)
			qcancel()
			if err == nil {
				samples = append(samples, DNSSample{Sent: sent, Ports: ports})
			} else if ctx.Err() == nil {
				failed = append(failed, err)
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	return func() (DNSSamples, []error) {
		cancel()
		<-done
		return samples, failed
	}
}
