// Command consullock is the release's `consullock` binary and the OCI
// image's entrypoint (/ko-app/consullock): `consullock controller`,
// `consullock run`, `consullock status`. It is the same program as the
// provider binary at the module root (internal/cli); only the name differs.
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
