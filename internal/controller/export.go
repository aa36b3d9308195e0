package controller

import (
	"github.com/hashicorp/consul/api"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

// ObservedSession converts a Consul session entry exactly as the controller
// does before judging it, so that `consullock status` judges the same
// values with the same Decide.
func ObservedSession(e *api.SessionEntry) lockmodel.ObservedSession { return observedSession(e) }
