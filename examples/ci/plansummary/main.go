// Command plansummary renders an OpenTofu/Terraform plan as a Markdown
// summary for a pull request: the resources by action, and for consullock
// resources the plan-time values a reviewer needs (lock keys, flags and
// limits, session profiles with worst_case_gap, ACL rules as a diff, token
// policies), plus what the refresh found changed outside OpenTofu.
//
//	tofu plan -input=false -out=tfplan -json > plan-log.jsonl
//	tofu show -json tfplan > plan.json
//	plansummary -plan plan.json -log plan-log.jsonl > summary.md
//
// Warnings (for example "Sessions on any node") are not part of the plan
// JSON; they are read from the optional -log, the machine-readable output of
// `tofu plan -json`. Values the plan marks sensitive (an ACL token's
// secret_id) are never printed, although the plan JSON holds them in clear
// text. The program uses only the standard library, so it can be copied
// into any repository or run with `go run`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("plansummary", flag.ContinueOnError)
	flags.SetOutput(stderr)
	planPath := flags.String("plan", "-", "`file` with the plan JSON, the output of 'tofu show -json <planfile>': - for stdin, \"\" when the plan failed (then only -log is reported)")
	logPath := flags.String("log", "", "optional `file` with the output of 'tofu plan -json' (one JSON message a line), for warnings and errors")
	title := flags.String("title", "", "`heading` of the summary (default \"OpenTofu plan\"), e.g. the configuration's directory")
	maxBytes := flags.Int("max-bytes", 60000, "cut the summary to this size (a GitHub comment holds 65536 characters); 0 for no limit")
	flags.Usage = func() {
		fmt.Fprintf(stderr, "Usage: plansummary [-plan plan.json] [-log plan-log.jsonl] [-title T] [-max-bytes N] > summary.md\n\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "plansummary: unexpected arguments %q\n", flags.Args())
		return 2
	}

	if *planPath == "" && *logPath == "" {
		fmt.Fprintln(stderr, "plansummary: -plan \"\" (no plan) needs -log")
		return 2
	}
	var p *plan
	if *planPath != "" {
		in := stdin
		if *planPath != "-" {
			f, err := os.Open(*planPath)
			if err != nil {
				fmt.Fprintf(stderr, "plansummary: %v\n", err)
				return 1
			}
			defer f.Close()
			in = f
		}
		var err error
		if p, err = readPlan(in); err != nil {
			fmt.Fprintf(stderr, "plansummary: %v\n", err)
			return 1
		}
	}
	opts := options{title: *title}
	if *logPath != "" {
		f, err := os.Open(*logPath)
		if err != nil {
			fmt.Fprintf(stderr, "plansummary: %v\n", err)
			return 1
		}
		defer f.Close()
		opts.diagnostics, err = readDiagnostics(f)
		if err != nil {
			fmt.Fprintf(stderr, "plansummary: %v\n", err)
			return 1
		}
		opts.logGiven = true
	}
	out := truncate(render(p, opts), *maxBytes)
	if _, err := io.WriteString(stdout, out); err != nil {
		fmt.Fprintf(stderr, "plansummary: %v\n", err)
		return 1
	}
	return 0
}

// truncate cuts s to at most n bytes at a line boundary, closing an open
// code block, and says so.
func truncate(s string, n int) string {
	const note = "\n\n**Summary cut to fit.** See the full plan in the job log.\n"
	if n <= 0 || len(s) <= n {
		return s
	}
	cut := s[:max(0, n-len(note)-8)]
	for i := len(cut) - 1; i >= 0; i-- {
		if cut[i] == '\n' {
			cut = cut[:i]
			break
		}
	}
	fences := 0
	for i := 0; i+3 <= len(cut); i++ {
		if (i == 0 || cut[i-1] == '\n') && cut[i:i+3] == "```" {
			fences++
		}
	}
	if fences%2 == 1 {
		cut += "\n```"
	}
	return cut + note
}
