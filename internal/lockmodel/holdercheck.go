package lockmodel

import "github.com/consullock/terraform-provider-consullock/internal/holdersvc"

// NewHolderCheck is the holder check for profile p (defaults applied
// here): the session rules' numbers, as holdersvc.NewCheck takes them.
func NewHolderCheck(p SessionProfile) holdersvc.Check {
	d := p.WithDefaults()
	return holdersvc.NewCheck(holdersvc.Timing{
		Bound:           TakeOverDelay(d.LockDelay),
		RenewEvery:      d.RenewEvery,
		RenewTimeout:    RenewTimeout(d.RenewEvery),
		MaxRenewTimeout: MaxRenewTimeout,
		MaxLockDelay:    MaxLockDelay,
	})
}
