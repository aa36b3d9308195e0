package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

var _ function.Function = (*lockKeyFunction)(nil)

// NewLockKeyFunction is provider::consullock::lock_key.
func NewLockKeyFunction() function.Function { return &lockKeyFunction{} }

type lockKeyFunction struct{}

func (f *lockKeyFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "lock_key"
}

func (f *lockKeyFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "The lock key under a prefix",
		MarkdownDescription: "Returns the key that `consul lock <prefix>`, api.Lock and api.Semaphore use, `<prefix>/.lock`, " +
			"with the prefix normalised as `consullock_lock` normalises it (the same key its computed `key` shows).",
		Parameters: []function.Parameter{
			function.StringParameter{Name: "prefix", MarkdownDescription: "The lock's KV prefix, e.g. `service/billing/leader`."},
		},
		Return: function.StringReturn{},
	}
}

func (f *lockKeyFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var prefix string
	resp.Error = req.Arguments.Get(ctx, &prefix)
	if resp.Error != nil {
		return
	}
	p, err := lockmodel.NormalizeKeyPath("prefix", prefix)
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, err.Error())
		return
	}
	resp.Error = resp.Result.Set(ctx, lockmodel.DefaultLockKey(p))
}
