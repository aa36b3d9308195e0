// Command terraform-provider-consullock serves the consullock provider, and
// runs consullock's other programs when called with their name. The
// registries require this binary name; the release also builds the same
// program as `consullock` (cmd/consullock). Both are internal/cli.
package main

import (
	"os"

	"github.com/consullock/terraform-provider-consullock/internal/cli"
)

// version is set by the release build (goreleaser) with -ldflags.
var version = "dev"

func main() {
	os.Exit(cli.Main(version))
}
