package lockmodel

import "github.com/consullock/terraform-provider-consullock/internal/holdersvc"

// NewHolderCheck is the holder check for profile p: the session rules'
// numbers, as holdersvc.NewCheck takes them.
func NewHolderCheck(p Profile) holdersvc.Check {
	return holdersvc.NewCheck(holdersvc.Timing{
		Bound:           TakeOverDelay(p.LockDelay),
		RenewEvery:      p.RenewEvery,
		RenewTimeout:    RenewTimeout(p.RenewEvery),
		MaxRenewTimeout: MaxRenewTimeout,
		MaxLockDelay:    MaxLockDelay,
	})
}
