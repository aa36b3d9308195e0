package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// selectTools runs `demo.sh --select` with a PATH holding only the given
// fake binaries (name -> first line of their `version`), so the machine's
// own consul, tofu or terraform cannot leak in.
func selectTools(t *testing.T, fakes map[string]string, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	for name, version := range fakes {
		// printf is a builtin: PATH has nothing else.
		script := "#!/bin/sh\n[ \"$1\" = version ] || exit 2\nprintf '%s\\n'"
		for _, line := range strings.Split(version+"\non linux_amd64", "\n") {
			script += " '" + strings.ReplaceAll(line, "'", `'\''`) + "'"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, "demo.sh", "--select")
	cmd.Env = append([]string{"PATH=" + dir, "HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh --select: %v\n%s", err, out)
	}
	return string(out)
}

func TestDemoSelect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fakes map[string]string
		env   []string
		want  []string
	}{{
		name:  "recent tofu and consul on PATH are used, nothing is built",
		fakes: map[string]string{"tofu": "OpenTofu v1.11.2", "consul": "Consul v1.20.1"},
		want:  []string{"consul: Consul 1.20.1 (", "/consul, from PATH)", "cli: OpenTofu 1.11.2 (", "/tofu, from PATH)", "build: nothing"},
	}, {
		name:  "the oldest supported versions are enough",
		fakes: map[string]string{"tofu": "OpenTofu v1.10.0", "consul": "Consul v1.14.0"},
		want:  []string{"consul: Consul 1.14.0 (", "cli: OpenTofu 1.10.0 (", "build: nothing"},
	}, {
		name:  "tofu is preferred over terraform",
		fakes: map[string]string{"tofu": "OpenTofu v1.12.6", "terraform": "Terraform v1.9.8", "consul": "Consul v1.16.3"},
		want:  []string{"cli: OpenTofu 1.12.6 (", "build: nothing"},
	}, {
		name:  "terraform when tofu is too old; an enterprise consul counts",
		fakes: map[string]string{"tofu": "OpenTofu v1.9.1", "terraform": "Terraform v1.5.7", "consul": "Consul v1.16.3+ent"},
		want: []string{"not using", "/tofu: OpenTofu 1.9.1 is older than 1.10.0",
			"cli: Terraform 1.5.7 (", "/terraform, from PATH)", "consul: Consul 1.16.3 (", "build: nothing"},
	}, {
		name:  "too old everywhere: the pinned ones are built",
		fakes: map[string]string{"terraform": "Terraform v1.4.6", "consul": "Consul v1.13.9"},
		want: []string{"/terraform: Terraform 1.4.6 is older than 1.5.0", "/consul: Consul 1.13.9 is older than 1.14.0",
			"consul: Consul 1.14.11 (pinned, bin/consul)", "cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "build: consul tofu"},
	}, {
		name:  "a binary named tofu that is something else is not used",
		fakes: map[string]string{"tofu": "tofu, the soy bean curd, v9.9.9", "consul": "Consul v1.20.1"},
		want:  []string{"/tofu: its `tofu version` does not report OpenTofu", "cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "build: tofu"},
	}, {
		// What OpenTofu 1.12 prints when TF_CLI_CONFIG_FILE names a missing file.
		name:  "warnings before the version line are passed over",
		fakes: map[string]string{"tofu": "\nWarning: Unable to open CLI configuration file\n\nOpenTofu v1.12.6", "consul": "Consul v1.14.11"},
		want:  []string{"cli: OpenTofu 1.12.6 (", "/tofu, from PATH)", "build: nothing"},
	}, {
		name: "nothing on PATH: the pinned ones are built",
		want: []string{"consul: Consul 1.14.11 (pinned, bin/consul)", "cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "build: consul tofu"},
	}, {
		name:  "DEMO_PINNED=1 ignores PATH",
		fakes: map[string]string{"tofu": "OpenTofu v1.11.2", "consul": "Consul v1.20.1"},
		env:   []string{"DEMO_PINNED=1"},
		want:  []string{"consul: Consul 1.14.11 (pinned, bin/consul)", "cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "build: consul tofu"},
	}, {
		name:  "versions compare as numbers, not strings",
		fakes: map[string]string{"tofu": "OpenTofu v1.9.10", "terraform": "Terraform v1.5.10", "consul": "Consul v1.100.0"},
		want: []string{"OpenTofu 1.9.10 is older than 1.10.0", "/terraform: Terraform 1.5.10 is newer than 1.5.7",
			"cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "consul: Consul 1.100.0 (", "build: tofu"},
	}, {
		// HashiCorp Terraform after 1.5.7 is not open source: never used.
		name:  "a Terraform newer than 1.5.7 is not used; the pinned OpenTofu is built",
		fakes: map[string]string{"terraform": "Terraform v1.11.4", "consul": "Consul v1.14.11"},
		want: []string{"/terraform: Terraform 1.11.4 is newer than 1.5.7 (the last open-source Terraform",
			"cli: OpenTofu 1.12.6 (pinned, bin/tofu)", "build: tofu"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			out := selectTools(t, tc.fakes, tc.env...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
