package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// CLIFeature is a language feature that only newer Terraform/OpenTofu CLIs
// have. Acceptance tests that need one call RequireCLIFeature first.
type CLIFeature string

// The features consullock uses that older CLIs lack.
const (
	FeatureEphemeralResources CLIFeature = "ephemeral resources"
	FeatureWriteOnlyAttrs     CLIFeature = "write-only attributes"
	FeatureProviderFunctions  CLIFeature = "provider functions"
	FeatureIdentityImport     CLIFeature = "import by resource identity"
)

// featureSince is the first release of each CLI that has the feature, from
// their changelogs: OpenTofu 1.7 (provider functions), 1.11 (ephemeral
// resources, write-only attributes), 1.12 (import blocks with identity);
// Terraform 1.8, 1.10, 1.11, 1.12.
var featureSince = map[string]map[CLIFeature]cliVersion{
	"tofu": {
		FeatureProviderFunctions:  {1, 7, 0},
		FeatureEphemeralResources: {1, 11, 0},
		FeatureWriteOnlyAttrs:     {1, 11, 0},
		FeatureIdentityImport:     {1, 12, 0},
	},
	"terraform": {
		FeatureProviderFunctions:  {1, 8, 0},
		FeatureEphemeralResources: {1, 10, 0},
		FeatureWriteOnlyAttrs:     {1, 11, 0},
		FeatureIdentityImport:     {1, 12, 0},
	},
}

// NotSupportedPrefix starts the skip message of a test whose feature the CLI
// lacks; the compatibility matrix reports such tests as "not supported by
// this CLI" instead of as passed or failed.
const NotSupportedPrefix = "not supported by this CLI: "

type cliVersion [3]int

func (v cliVersion) less(w cliVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

func (v cliVersion) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// CLIInfo is the CLI that TF_ACC_TERRAFORM_PATH (or bin/tofu) names.
type CLIInfo struct {
	Path    string
	Name    string // "tofu" or "terraform"
	Version string // e.g. "1.12.6"
	version cliVersion
}

// Has reports whether the CLI has feature f.
func (c CLIInfo) Has(f CLIFeature) bool {
	since, ok := featureSince[c.Name][f]
	return ok && !c.version.less(since)
}

var (
	cliMu    sync.Mutex
	cliCache = map[string]CLIInfo{}
)

// versionLine matches the version line of `tofu version` / `terraform version`.
var versionLine = regexp.MustCompile(`^(OpenTofu|Terraform) v(\d+)\.(\d+)\.(\d+)`)

// DetectCLI runs `<cli> version` once per path and reports which CLI it is.
func DetectCLI() (CLIInfo, error) {
	bin, err := ToolPath("TF_ACC_TERRAFORM_PATH", "tofu")
	if err != nil {
		return CLIInfo{}, err
	}
	cliMu.Lock()
	defer cliMu.Unlock()
	if info, ok := cliCache[bin]; ok {
		return info, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "version")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	if os.Getenv("TF_CLI_CONFIG_FILE") == "" {
		// A missing ~/.terraformrc only earns a warning; keep it quiet.
		cmd.Env = append(cmd.Env, "TF_CLI_CONFIG_FILE="+os.DevNull)
	}
	out, err := cmd.Output()
	if err != nil {
		return CLIInfo{}, fmt.Errorf("%s version: %w", bin, err)
	}
	// OpenTofu 1.12 prints CLI configuration warnings before the version
	// line: take the first line that is one.
	info, err := parseVersionLine(bin, string(out))
	for line := range strings.Lines(string(out)) {
		if versionLine.MatchString(line) {
			info, err = parseVersionLine(bin, line)
			break
		}
	}
	if err != nil {
		return CLIInfo{}, err
	}
	cliCache[bin] = info
	return info, nil
}

func parseVersionLine(bin, line string) (CLIInfo, error) {
	m := versionLine.FindStringSubmatch(line)
	if m == nil {
		return CLIInfo{}, fmt.Errorf("%s version: no version line in %q", bin, line)
	}
	info := CLIInfo{Path: bin, Name: "terraform"}
	if m[1] == "OpenTofu" {
		info.Name = "tofu"
	}
	for i := range info.version {
		info.version[i], _ = strconv.Atoi(m[2+i]) // the regexp matched digits
	}
	info.Version = info.version.String()
	return info, nil
}

// RequireCLIFeature skips t, with a message starting NotSupportedPrefix,
// when the CLI the acceptance tests run lacks feature f. A CLI that cannot
// be identified fails the test: that must never pass as "not supported".
func RequireCLIFeature(t testing.TB, f CLIFeature) {
	t.Helper()
	info, err := DetectCLI()
	if err != nil {
		t.Fatalf("identify the CLI for %s: %v", f, err)
	}
	if !info.Has(f) {
		since := featureSince[info.Name][f]
		t.Skipf("%s%s (needs %s %s or later; this is %s %s)", NotSupportedPrefix, f, info.Name, since, info.Name, info.Version)
	}
}
