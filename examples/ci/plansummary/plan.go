package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// plan is the part of the JSON plan format (`tofu show -json <planfile>`,
// format_version 1.x) that the summary reads.
type plan struct {
	FormatVersion    string                  `json:"format_version"`
	TerraformVersion string                  `json:"terraform_version"`
	ResourceChanges  []resourceChange        `json:"resource_changes"`
	ResourceDrift    []resourceChange        `json:"resource_drift"`
	OutputChanges    map[string]outputChange `json:"output_changes"`
	Errored          bool                    `json:"errored"`
}

type resourceChange struct {
	Address      string `json:"address"`
	Mode         string `json:"mode"` // "managed" or "data"
	Type         string `json:"type"`
	Name         string `json:"name"`
	Change       change `json:"change"`
	ActionReason string `json:"action_reason"`
}

// change holds a before and an after object. Unknown values are absent from
// after and marked in after_unknown; sensitive values are present in clear
// text and marked in before_sensitive/after_sensitive (true for the whole
// value, or an object/array of the same shape as the value).
type change struct {
	Actions         []string `json:"actions"`
	Before          any      `json:"before"`
	After           any      `json:"after"`
	AfterUnknown    any      `json:"after_unknown"`
	BeforeSensitive any      `json:"before_sensitive"`
	AfterSensitive  any      `json:"after_sensitive"`
	ReplacePaths    [][]any  `json:"replace_paths"`
	Importing       *struct {
		ID string `json:"id"`
	} `json:"importing"`
}

type outputChange struct {
	Actions []string `json:"actions"`
}

func readPlan(r io.Reader) (*plan, error) {
	var p plan
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("reading the plan JSON (the output of `tofu show -json <planfile>`): %w", err)
	}
	if p.FormatVersion == "" {
		return nil, fmt.Errorf("not a plan JSON: no format_version (use the output of `tofu show -json <planfile>`, not of `tofu plan -json`)")
	}
	if !strings.HasPrefix(p.FormatVersion, "1.") {
		return nil, fmt.Errorf("plan JSON format_version %s is not supported (1.x is)", p.FormatVersion)
	}
	return &p, nil
}

// diagnostic is a warning or error from the machine-readable UI output of
// `tofu plan -json` (one JSON object per line, "type": "diagnostic"). The
// plan JSON itself holds no diagnostics.
type diagnostic struct {
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail"`
	Address  string `json:"address"`
}

// readDiagnostics returns the diagnostics of a `tofu plan -json` log in
// order, without duplicates (OpenTofu repeats them at the end of the run).
func readDiagnostics(r io.Reader) ([]diagnostic, error) {
	var out []diagnostic
	seen := map[diagnostic]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] != '{' {
			continue
		}
		var msg struct {
			Type       string      `json:"type"`
			Diagnostic *diagnostic `json:"diagnostic"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			return nil, fmt.Errorf("reading the plan log (the output of `tofu plan -json`): %w", err)
		}
		if msg.Type != "diagnostic" || msg.Diagnostic == nil || seen[*msg.Diagnostic] {
			continue
		}
		seen[*msg.Diagnostic] = true
		out = append(out, *msg.Diagnostic)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the plan log: %w", err)
	}
	return out, nil
}

// action is what a plan does to one resource, named as the plan output
// names it.
type action string

const (
	actCreate  action = "create"
	actUpdate  action = "update"
	actReplace action = "replace"
	actDelete  action = "destroy"
	actRead    action = "read"
	actForget  action = "forget"
	actImport  action = "import"
	actNoop    action = "no-op"
)

// actionOrder is the order of the summary's table.
var actionOrder = []action{actCreate, actImport, actUpdate, actReplace, actDelete, actForget, actRead}

// symbols are the markers `tofu plan` prints.
var symbols = map[action]string{
	actCreate: "+", actUpdate: "~", actReplace: "-/+", actDelete: "-",
	actRead: "<=", actForget: ".", actImport: "<-", actNoop: " ",
}

func (c change) action() action {
	a := strings.Join(c.Actions, ",")
	switch a {
	case "create":
		return actCreate
	case "update":
		return actUpdate
	case "delete,create", "create,delete":
		return actReplace
	case "delete":
		return actDelete
	case "read":
		return actRead
	case "forget":
		return actForget
	case "no-op", "":
		if c.Importing != nil {
			return actImport
		}
		return actNoop
	}
	return action(a)
}
