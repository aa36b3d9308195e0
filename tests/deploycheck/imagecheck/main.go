// Command imagecheck builds the release's OCI image of consullock from the
// `kos:` section of .goreleaser.yml with ko, into an OCI image layout on
// disk, and checks what the release promises: both platforms, the non-root
// user, the entrypoint, the OCI labels, and a binary that runs.
//
// No Docker daemon and no registry on the network: the base image is an
// empty ("scratch") multi-platform index served by an in-process registry on
// loopback, because the release's base (cgr.dev/chainguard/static) cannot be
// pulled here. Everything else (platforms, user, labels, ldflags, flags,
// env) is read from .goreleaser.yml, so the image differs from a release's
// only by the base layers under /ko-app.
//
//	go -C tests build -o ../bin/imagecheck ./deploycheck/imagecheck  # from the repository root
//	bin/imagecheck -ko bin/ko -out dist/image
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// checkVersion is the version the check stamps into the binary through the
// release's own ldflags template ({{ .Version }}).
const checkVersion = "0.0.0-imagecheck"

// entrypoint is where ko puts the binary: /ko-app/<last element of the
// import path>, so the kos entry builds ./cmd/consullock and the image's
// entrypoint is named consullock (issue 23).
const entrypoint = "/ko-app/consullock"

// nonRootUID is the user the image runs as: the nonroot user of the
// distroless and Chainguard bases, which the Kubernetes examples name.
const nonRootUID = "65532"

// requiredLabels must be present in every platform's image config.
var requiredLabels = []string{
	"org.opencontainers.image.source",
	"org.opencontainers.image.version",
	"org.opencontainers.image.licenses",
}

type goreleaserConfig struct {
	Builds []struct {
		ID      string   `json:"id"`
		Env     []string `json:"env"`
		Flags   []string `json:"flags"`
		Ldflags []string `json:"ldflags"`
	} `json:"builds"`
	Kos []koConfig `json:"kos"`
}

type koConfig struct {
	ID           string            `json:"id"`
	Build        string            `json:"build"`
	Main         string            `json:"main"`
	BaseImage    string            `json:"base_image"`
	Repositories []string          `json:"repositories"`
	Platforms    []string          `json:"platforms"`
	User         string            `json:"user"`
	Bare         bool              `json:"bare"`
	Labels       map[string]string `json:"labels"`
	Env          []string          `json:"env"`
	Flags        []string          `json:"flags"`
	Ldflags      []string          `json:"ldflags"`
}

func main() {
	configPath := flag.String("config", ".goreleaser.yml", "goreleaser configuration")
	koBin := flag.String("ko", "bin/ko", "the ko binary")
	out := flag.String("out", "dist/image", "OCI image layout to write (emptied first)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("image-check: ")
	if err := run(*configPath, *koBin, *out); err != nil {
		log.Fatal(err)
	}
}

func run(configPath, koBin, out string) error {
	ko, err := readKoConfig(configPath)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	base := strings.TrimPrefix(srv.URL, "http://") + "/scratch:base"
	if err := pushScratchBase(base, ko.Platforms); err != nil {
		return fmt.Errorf("pushing the scratch base: %w", err)
	}
	if err := koBuild(koBin, ko, base, out); err != nil {
		return err
	}
	return inspect(out, ko)
}

// readKoConfig returns the first kos entry with the defaults goreleaser
// applies (ldflags, flags and env from its build) and templates rendered.
func readKoConfig(path string) (koConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return koConfig{}, err
	}
	var cfg goreleaserConfig
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return koConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(cfg.Kos) != 1 {
		return koConfig{}, fmt.Errorf("%s: want one kos entry, have %d", path, len(cfg.Kos))
	}
	ko := cfg.Kos[0]
	for _, b := range cfg.Builds {
		if b.ID != ko.Build {
			continue
		}
		if len(ko.Ldflags) == 0 {
			ko.Ldflags = b.Ldflags
		}
		if len(ko.Flags) == 0 {
			ko.Flags = b.Flags
		}
		if len(ko.Env) == 0 {
			ko.Env = b.Env
		}
	}
	if len(ko.Repositories) == 0 || len(ko.Platforms) == 0 || ko.User == "" {
		return koConfig{}, fmt.Errorf("%s: kos %q needs repositories, platforms and user", path, ko.ID)
	}
	commit, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	data := map[string]string{
		"Version":         checkVersion,
		"FullCommit":      strings.TrimSpace(string(commit)),
		"CommitTimestamp": "0",
	}
	render := func(s string) (string, error) {
		t, err := template.New("").Option("missingkey=error").Parse(s)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		err = t.Execute(&b, data)
		return b.String(), err
	}
	for i, f := range ko.Ldflags {
		if ko.Ldflags[i], err = render(f); err != nil {
			return koConfig{}, err
		}
	}
	for k, v := range ko.Labels {
		if ko.Labels[k], err = render(v); err != nil {
			return koConfig{}, err
		}
	}
	return ko, nil
}

// pushScratchBase pushes an index of empty images, one per platform.
func pushScratchBase(ref string, platforms []string) error {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return err
		}
		img, err := mutate.ConfigFile(mutate.MediaType(empty.Image, types.OCIManifestSchema1), &v1.ConfigFile{
			OS:           plat.OS,
			Architecture: plat.Architecture,
			Variant:      plat.Variant,
			RootFS:       v1.RootFS{Type: "layers"},
		})
		if err != nil {
			return err
		}
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	return remote.WriteIndex(r, idx)
}

// koBuild runs ko with the kos entry's settings into an OCI layout.
func koBuild(koBin string, ko koConfig, base, out string) error {
	dir, err := os.MkdirTemp("", "imagecheck-ko")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	koYAML, err := yaml.Marshal(map[string]any{
		"defaultBaseImage": base,
		"builds": []map[string]any{{
			"id": ko.ID, "main": ko.Main, "env": ko.Env, "flags": ko.Flags, "ldflags": ko.Ldflags,
		}},
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ".ko.yaml"), koYAML, 0o644); err != nil {
		return err
	}
	args := []string{"build", "--push=false", "--oci-layout-path", out, "--sbom", "none",
		"--platform", strings.Join(ko.Platforms, ","), "--image-user", ko.User}
	if ko.Bare {
		args = append(args, "--bare")
	}
	keys := make([]string, 0, len(ko.Labels))
	for k := range ko.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		// ko reads the flag as CSV: a quoted field keeps its commas.
		args = append(args, "--image-label", `"`+strings.ReplaceAll(k+"="+ko.Labels[k], `"`, `""`)+`"`)
	}
	args = append(args, ko.Main)
	cmd := exec.Command(koBin, args...)
	cmd.Env = append(os.Environ(), "KO_CONFIG_PATH="+dir, "KO_DOCKER_REPO="+ko.Repositories[0])
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	log.Printf("%s %s", koBin, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ko build: %w", err)
	}
	return nil
}

// inspect checks the layout ko wrote: one multi-platform index whose images
// carry the user, entrypoint and labels, with a binary for each platform;
// the one for this machine's platform runs -version.
func inspect(out string, ko koConfig) error {
	p, err := layout.FromPath(out)
	if err != nil {
		return err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return err
	}
	tm, err := top.IndexManifest()
	if err != nil {
		return err
	}
	if len(tm.Manifests) != 1 || !tm.Manifests[0].MediaType.IsIndex() {
		return fmt.Errorf("layout: want one image index, have %d manifests", len(tm.Manifests))
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	var got []string
	var problems []error
	for _, d := range im.Manifests {
		if d.Platform == nil {
			problems = append(problems, fmt.Errorf("manifest %s has no platform", d.Digest))
			continue
		}
		plat := d.Platform.String()
		got = append(got, plat)
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		size, err := checkImage(img, plat, ko)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", plat, err))
			continue
		}
		log.Printf("%s: user %s, entrypoint %s, labels ok, %d bytes compressed (%s)", plat, ko.User, entrypoint, size, d.Digest)
	}
	want := slices.Clone(ko.Platforms)
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		problems = append(problems, fmt.Errorf("platforms %v, want %v", got, want))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	log.Printf("ok: %s holds %s for %s", out, tm.Manifests[0].Digest, strings.Join(got, ", "))
	return nil
}

func checkImage(img v1.Image, plat string, ko koConfig) (int64, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return 0, err
	}
	var problems []error
	if cf.Config.User != ko.User {
		problems = append(problems, fmt.Errorf("user %q, want %q", cf.Config.User, ko.User))
	}
	if uid, _, _ := strings.Cut(cf.Config.User, ":"); uid != nonRootUID {
		problems = append(problems, fmt.Errorf("user %q: want the non-root uid %s (distroless nonroot)", cf.Config.User, nonRootUID))
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) {
		problems = append(problems, fmt.Errorf("entrypoint %q, want [%s]", cf.Config.Entrypoint, entrypoint))
	}
	for _, k := range requiredLabels {
		if cf.Config.Labels[k] == "" {
			problems = append(problems, fmt.Errorf("label %s missing", k))
		}
	}
	for k, v := range ko.Labels {
		if cf.Config.Labels[k] != v {
			problems = append(problems, fmt.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v))
		}
	}
	if cf.Config.Labels["org.opencontainers.image.licenses"] != "MPL-2.0" {
		problems = append(problems, errors.New("label org.opencontainers.image.licenses is not MPL-2.0"))
	}
	var size int64
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		s, err := l.Size()
		if err != nil {
			return 0, err
		}
		size += s
	}
	bin, err := extract(img, strings.TrimPrefix(entrypoint, "/"))
	if err != nil {
		return 0, err
	}
	if err := checkBinary(bin, cf.Architecture); err != nil {
		problems = append(problems, err)
	}
	if plat == runtime.GOOS+"/"+runtime.GOARCH {
		if err := runVersion(bin); err != nil {
			problems = append(problems, err)
		}
	}
	return size, errors.Join(problems...)
}

// extract reads one file from the image's flattened filesystem.
func extract(img v1.Image, path string) ([]byte, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s is not in the image", path)
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(h.Name, "/") != path {
			continue
		}
		if h.Mode&0o111 == 0 {
			return nil, fmt.Errorf("%s is not executable (mode %o)", path, h.Mode)
		}
		return io.ReadAll(tr)
	}
}

var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkBinary(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("%s: not an ELF binary: %w", entrypoint, err)
	}
	if want, ok := elfMachine[arch]; !ok || f.Machine != want {
		return fmt.Errorf("%s is built for %s, the image says %s", entrypoint, f.Machine, arch)
	}
	return nil
}

// runVersion runs the image's binary (taken out of the image's filesystem)
// with -version and expects the version the release's ldflags stamp in.
func runVersion(bin []byte) error {
	f, err := os.CreateTemp("", "consullock-image-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(bin); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		return err
	}
	outp, err := exec.Command(f.Name(), "-version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -version: %w: %s", entrypoint, err, outp)
	}
	if strings.TrimSpace(string(outp)) != checkVersion {
		return fmt.Errorf("%s -version printed %q, want %q", entrypoint, outp, checkVersion)
	}
	log.Printf("%s -version from the image's filesystem: %s", entrypoint, checkVersion)
	return runStatus(f.Name())
}

// runStatus runs `status -json` from the image's binary against a real
// Consul agent (testenv: CONSUL_BIN or bin/consul): exit 0 and a report.
func runStatus(bin string) error {
	if _, err := testenv.ToolPath("CONSUL_BIN", "consul"); err != nil {
		log.Printf("no Consul agent binary, status not run: %v", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		return err
	}
	defer agent.Stop()
	cmd := exec.CommandContext(ctx, bin, "status", "-json")
	cmd.Env = append(os.Environ(), agent.Env()...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outp, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s status -json against the test agent: %w: %s", entrypoint, err, stderr.String())
	}
	var report struct {
		SchemaVersion int `json:"schema_version"`
	}
	if err := json.Unmarshal(outp, &report); err != nil || report.SchemaVersion != 1 {
		return fmt.Errorf("%s status -json printed %q, want a report with schema_version 1 (%v)", entrypoint, outp, err)
	}
	log.Printf("%s status -json against a real Consul agent (%s): exit 0, schema_version 1", entrypoint, agent.Addr)
	return nil
}
