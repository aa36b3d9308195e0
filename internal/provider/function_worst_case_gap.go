package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/function"

	"github.com/consullock/terraform-provider-consullock/internal/lockmodel"
)

var _ function.Function = (*worstCaseGapFunction)(nil)

// NewWorstCaseGapFunction is provider::consullock::worst_case_gap.
func NewWorstCaseGapFunction() function.Function { return &worstCaseGapFunction{} }

type worstCaseGapFunction struct{}

func (f *worstCaseGapFunction) Metadata(_ context.Context, _ function.MetadataRequest, resp *function.MetadataResponse) {
	resp.Name = "worst_case_gap"
}

func (f *worstCaseGapFunction) Definition(_ context.Context, _ function.DefinitionRequest, resp *function.DefinitionResponse) {
	resp.Definition = function.Definition{
		Summary: "How long a crashed holder can leave a lock unusable",
		MarkdownDescription: "Returns `consullock_session_defaults.worst_case_gap` for the same inputs: 2 x `ttl` + `lock_delay` " +
			"(clamped to 60s, as Consul does), from the last renewal or a later leader election.",
		Parameters: []function.Parameter{
			function.StringParameter{Name: "ttl", MarkdownDescription: "Session TTL, a Go duration between 10s and 24h, e.g. `15s`."},
			function.StringParameter{Name: "lock_delay", MarkdownDescription: "Session lock-delay, a Go duration, e.g. `15s` or `0s`."},
		},
		Return: function.StringReturn{},
	}
}

func (f *worstCaseGapFunction) Run(ctx context.Context, req function.RunRequest, resp *function.RunResponse) {
	var ttlText, delayText string
	resp.Error = req.Arguments.Get(ctx, &ttlText, &delayText)
	if resp.Error != nil {
		return
	}
	ttl, err := parseDurationArg("ttl", ttlText)
	if err == nil {
		err = lockmodel.ValidateTTL("ttl", ttl)
	}
	if err != nil {
		resp.Error = function.NewArgumentFuncError(0, err.Error())
		return
	}
	delay, err := parseDurationArg("lock_delay", delayText)
	if err == nil {
		err = lockmodel.ValidateLockDelay("lock_delay", delay)
	}
	if err != nil {
		resp.Error = function.NewArgumentFuncError(1, err.Error())
		return
	}
	gap := lockmodel.WorstCaseGap(ttl, delay)
	resp.Error = resp.Result.Set(ctx, lockmodel.FormatDuration(gap))
}

func parseDurationArg(name, text string) (time.Duration, error) {
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration; use a Go duration such as \"15s\" or \"1m30s\"", name, text)
	}
	return d, nil
}
