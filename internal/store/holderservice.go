package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/holdersvc"
	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
)

// A holder's service instance (holdersvc.Instance) on the local
// agent: registered when the holder acquires, its TTL check passed after
// each renewal, deregistered before the release. Each call needs only
// service "<name>" write (aclrules.RulesInput.HolderServices).

// RegisterHolderService registers in on the client's agent, with its TTL
// check (passing or critical as in.Passing says) and
// DeregisterCriticalServiceAfter, so that an instance whose holder was
// killed leaves the catalog on its own. Registering the same ID again
// replaces it.
func (c Store) RegisterHolderService(ctx context.Context, in holdersvc.Instance) error {
	status := api.HealthCritical
	if in.Passing {
		status = api.HealthPassing
	}
	reg := &api.AgentServiceRegistration{
		ID: in.ID, Name: in.Name, Tags: in.Tags, Port: in.Port, Address: in.Address, Meta: in.Meta,
		Check: &api.AgentServiceCheck{
			CheckID: in.CheckID,
			Name:    "consullock holder " + in.Meta[holdersvc.MetaLock],
			Notes: "Passing while the holder renews its session; critical before anyone else can acquire, however the session ends (" +
				lockmodel.FormatDuration(in.Check.TTL) + " < lock_delay " + lockmodel.FormatDuration(in.Check.Bound) + ").",
			TTL:                            lockmodel.FormatDuration(in.Check.TTL),
			Status:                         status,
			DeregisterCriticalServiceAfter: lockmodel.FormatDuration(holdersvc.DeregisterCriticalAfter),
		},
	}
	if err := c.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)); err != nil {
		return c.Wrap("register holder service "+in.ID, err)
	}
	return nil
}

// PassHolderCheck passes the TTL check checkID of a holder's instance.
func (c Store) PassHolderCheck(ctx context.Context, checkID string) error {
	if err := c.Agent().UpdateTTLOpts(checkID, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return c.Wrap("pass holder check "+checkID, err)
	}
	return nil
}

// DeregisterHolderService removes instance serviceID (and its check) from
// the client's agent. An instance already gone is not an error.
func (c Store) DeregisterHolderService(ctx context.Context, serviceID string) error {
	err := c.Agent().ServiceDeregisterOpts(serviceID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil && consul.KindOf(consul.Classify("", err)) == consul.KindNotFound {
		return nil
	}
	if err != nil {
		return c.Wrap("deregister holder service "+serviceID, err)
	}
	return nil
}

// ServiceView is a holder's instance as the catalog shows it.
type ServiceView struct {
	ID      string
	Node    string
	Address string // the instance's address, else its node's
	Port    int
	// Status is the instance's aggregated health: its TTL check and its
	// node's checks ("passing", "warning", "critical"). DNS answers only
	// an instance that is not critical.
	Status       string
	Session      string
	FencingToken uint64
}

// ReadHolderServices reads the instances of holder service name that the
// given sessions registered (holdersvc.ServiceID), in one health
// query; a holder without an instance is left out. consistent as in
// ReadLock.
func (c Store) ReadHolderServices(ctx context.Context, name string, sessions []string, consistent bool) ([]ServiceView, error) {
	if len(sessions) == 0 {
		return nil, nil
	}
	q := (&api.QueryOptions{RequireConsistent: consistent, AllowStale: !consistent}).WithContext(ctx)
	entries, _, err := c.Health().Service(name, "", false, q)
	if err != nil {
		return nil, c.Wrap("read holder service "+name, err)
	}
	want := make(map[string]string, len(sessions))
	for _, s := range sessions {
		want[holdersvc.ServiceID(name, s)] = s
	}
	var out []ServiceView
	for _, e := range entries {
		if e.Service == nil || e.Node == nil {
			continue
		}
		session, ok := want[e.Service.ID]
		if !ok {
			continue
		}
		v := ServiceView{ID: e.Service.ID, Node: e.Node.Node, Address: e.Service.Address, Port: e.Service.Port,
			Status: e.Checks.AggregatedStatus(), Session: session}
		if v.Address == "" {
			v.Address = e.Node.Address
		}
		v.FencingToken, _ = strconv.ParseUint(e.Service.Meta[holdersvc.MetaFencingToken], 10, 64)
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	return out, nil
}

// Agentless: a runner with no agent of its own registers its holder's
// instance on the session's node in the catalog (holdersvc.ViaCatalog).
// Nobody runs a catalog check: the instance is registered passing and stays
// until it is deregistered, by its runner on exit or loss, or by the next
// holder (StaleHolderInstances) before that one starts its command.

// RegisterHolderServiceCatalog registers in on node (which must be in the
// catalog) through PUT /v1/catalog/register, with a passing check of its
// own so that health queries list it; the node itself is not updated
// (SkipNodeUpdate). It needs service "<name>" write and node "<node>"
// write.
func (c Store) RegisterHolderServiceCatalog(ctx context.Context, node string, in holdersvc.Instance) error {
	reg := &api.CatalogRegistration{
		Node: node, SkipNodeUpdate: true,
		Service: &api.AgentService{ID: in.ID, Service: in.Name, Tags: in.Tags, Port: in.Port, Address: in.Address, Meta: in.Meta},
		Check: &api.AgentCheck{
			Node: node, CheckID: in.CheckID, Name: "consullock holder " + in.Meta[holdersvc.MetaLock],
			Status: api.HealthPassing, ServiceID: in.ID, ServiceName: in.Name,
			Notes: "Registered in the catalog by an agentless holder: passing until the holder deregisters it, or the next holder does before it starts.",
		},
	}
	if _, err := c.Catalog().Register(reg, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return c.Wrap("register holder service "+in.ID+" on node "+node, err)
	}
	return nil
}

// DeregisterHolderServiceCatalog removes instance serviceID (and its
// check) from node in the catalog. An instance already gone is not an
// error.
func (c Store) DeregisterHolderServiceCatalog(ctx context.Context, node, serviceID string) error {
	_, err := c.Catalog().Deregister(&api.CatalogDeregistration{Node: node, ServiceID: serviceID}, (&api.WriteOptions{}).WithContext(ctx))
	var e *consul.Error
	if err != nil && errors.As(consul.Classify("", err), &e) && (e.Kind == consul.KindNotFound ||
		e.StatusCode == http.StatusInternalServerError && strings.Contains(e.Message, "Unknown service ID")) {
		return nil // Consul answers 500 "Unknown service ID" for an instance already gone
	}
	if err != nil {
		return c.Wrap("deregister holder service "+serviceID+" on node "+node, err)
	}
	return nil
}

// InstanceRef is one holder's instance in the catalog: the node it
// is registered on and its service ID.
type InstanceRef struct {
	Node string
	ID   string
}

// StaleHolderInstances lists, on every node, the instances of holder
// service name that lock's holders registered, that DNS still answers (not
// critical) and that are stale for holder session mine
// (holdersvc.InstanceStale): one consistent health query filtered by
// the lock's meta, and for a semaphore (or mine "", the controller) one
// session read per other holder's instance. A critical instance is left alone: it is out of DNS
// already, and an agent that registered it removes it (a catalog
// deregistration would be undone by the agent's anti-entropy).
//
// It needs service "<name>" read (write covers it) and node read on the
// nodes the lock's holders registered on (their -node: the session node
// prefixes, rendered with holder_services). Consul leaves out the
// instances on nodes the token cannot read and says so only in a header:
// the stale instances it could see are returned with a permission-denied
// error, rather than taking the rest for absent.
func (c Store) StaleHolderInstances(ctx context.Context, name, lock string, limit int, mine string) ([]InstanceRef, error) {
	op := "list holder service " + name + " of lock " + lock
	q := (&api.QueryOptions{RequireConsistent: true, Filter: fmt.Sprintf("Service.Meta.%s == %q", holdersvc.MetaLock, lock)}).WithContext(ctx)
	entries, meta, err := c.Health().Service(name, "", false, q)
	if err != nil {
		return nil, c.Wrap(op, err)
	}
	var stale []InstanceRef
	for _, e := range entries {
		if e.Service == nil || e.Node == nil {
			continue
		}
		other := e.Service.Meta[holdersvc.MetaSession]
		if e.Service.Meta[holdersvc.MetaLock] != lock || other == "" || e.Service.ID != holdersvc.ServiceID(name, other) {
			continue // not a holder's instance of this lock
		}
		if e.Checks.AggregatedStatus() == api.HealthCritical {
			continue
		}
		alive := true
		if (limit > 1 || mine == "") && other != mine {
			info, _, err := c.Session().Info(other, (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
			if err != nil {
				return nil, c.Wrap("read session "+other, err)
			}
			alive = info != nil
		}
		if holdersvc.InstanceStale(limit, mine, other, alive) {
			stale = append(stale, InstanceRef{Node: e.Node.Node, ID: e.Service.ID})
		}
	}
	sort.Slice(stale, func(i, j int) bool {
		return stale[i].Node < stale[j].Node || stale[i].Node == stale[j].Node && stale[i].ID < stale[j].ID
	})
	if meta.ResultsFilteredByACLs {
		// Without node read on a holder's node the answer would look as if
		// that former holder had left, and it would stay in DNS.
		return stale, &consul.Error{Kind: consul.KindPermissionDenied, Op: op, StatusCode: http.StatusForbidden,
			Permission: "node:read", Resource: "a node with an instance of lock " + lock,
			Message: "instances of lock " + lock + " on nodes the token cannot read were left out of the answer (X-Consul-Results-Filtered-By-ACLs): the token lacks node read on them"}
	}
	return stale, nil
}
