// Command gendashboard writes the consullock Grafana dashboard JSON to the
// file named by its argument (in tests/: go generate ./observability/).
package main

import (
	"fmt"
	"os"

	"github.com/consullock/terraform-provider-consullock/tests/observability"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendashboard FILE")
		os.Exit(2)
	}
	out, err := observability.Dashboard()
	if err == nil {
		err = os.WriteFile(os.Args[1], out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendashboard:", err)
		os.Exit(1)
	}
}
