// Command packagecheck reads the .deb and .rpm packages `make packages`
// builds (goreleaser's nfpms: section) and checks what the release
// promises, from the archives themselves (no dpkg or rpm needed):
//
//   - one .deb and one .rpm for each of linux/amd64 and linux/arm64;
//
//   - exactly these files: /usr/bin/consullock (0755, an ELF for the
//     package's architecture), the runner's template unit and the
//     controller's unit under /usr/lib/systemd/system/ (0644, the
//     repository's files byte for byte, each starting /usr/bin/consullock),
//     the example environment files under /etc/consullock/ (0640, config
//     files an upgrade does not overwrite: conffiles in the .deb,
//     %config(noreplace) in the .rpm), the license (the .rpm) or the
//     Debian copyright file and lintian overrides (the .deb);
//
//   - the install script creates the users the units run as.
//
//     go -C tests build -o ../bin/packagecheck ./deploycheck/packagecheck  # from the repository root
//     bin/packagecheck -root . dist/*.deb dist/*.rpm
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// file is one file a package installs.
type file struct {
	mode    os.FileMode // permission bits
	config  bool        // conffile / %config(noreplace)
	sha256  string      // hex
	content []byte      // when the format gives it without unpacking (deb)
}

// pkg is what a package holds, read from its archive.
type pkg struct {
	path, format, arch string
	files              map[string]file
	dirs               map[string]os.FileMode
	preinstall         string
}

// want is the layout: destination -> (repository source or "" for the
// binary, mode, config).
var want = map[string]struct {
	src    string
	mode   os.FileMode
	config bool
}{
	"/usr/bin/consullock":                                   {"", 0o755, false},
	"/usr/lib/systemd/system/consullock-run@.service":       {"examples/deploy/consullock-run@.service", 0o644, false},
	"/usr/lib/systemd/system/consullock-controller.service": {"examples/controller/consullock-controller.service", 0o644, false},
	"/etc/consullock/controller.env":                        {"examples/controller/controller.env", 0o640, true},
	"/etc/consullock/run.env.example":                       {"examples/deploy/consullock-run.env.example", 0o640, true},
}

// wantByFormat are the files of one format only: destination -> source.
var wantByFormat = map[string]map[string]string{
	"deb": {"/usr/share/doc/consullock/copyright": "scripts/packaging/copyright", "/usr/share/lintian/overrides/consullock": "scripts/packaging/lintian-overrides"},
	"rpm": {"/usr/share/licenses/consullock/LICENSE": "LICENSE"},
}

func main() {
	root := flag.String("root", ".", "the repository root (the sources of the packaged files)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("packagecheck: ")
	var problems []string
	seen := map[string]bool{}
	for _, path := range flag.Args() {
		p, err := read(path)
		if err != nil {
			log.Fatalf("%s: %v", path, err)
		}
		seen[p.format+"/"+p.arch] = true
		for _, problem := range check(p, *root) {
			problems = append(problems, filepath.Base(path)+": "+problem)
		}
		names := make([]string, 0, len(p.files))
		for name := range p.files {
			names = append(names, name)
		}
		slices.Sort(names)
		fmt.Printf("%s (%s, %s):\n", filepath.Base(path), p.format, p.arch)
		for _, name := range names {
			f := p.files[name]
			conf := ""
			if f.config {
				conf = "  config, kept on upgrade"
			}
			fmt.Printf("  %04o %s%s\n", f.mode, name, conf)
		}
	}
	for _, w := range []string{"deb/amd64", "deb/arm64", "rpm/amd64", "rpm/arm64"} {
		if !seen[w] {
			problems = append(problems, "no "+w+" package among the arguments")
		}
	}
	if len(problems) > 0 {
		for _, p := range problems {
			log.Print(p)
		}
		os.Exit(1)
	}
	fmt.Printf("packagecheck: %d packages have the promised layout\n", len(flag.Args()))
}

// check compares p with the layout.
func check(p pkg, root string) []string {
	want := maps.Clone(want)
	for dst, src := range wantByFormat[p.format] {
		want[dst] = struct {
			src    string
			mode   os.FileMode
			config bool
		}{src, 0o644, false}
	}
	var out []string
	bad := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	for name := range p.files {
		if _, ok := want[name]; !ok {
			bad("unexpected file %s", name)
		}
	}
	for name, w := range want {
		f, ok := p.files[name]
		if !ok {
			bad("missing %s", name)
			continue
		}
		if f.mode != w.mode {
			bad("%s has mode %04o, want %04o", name, f.mode, w.mode)
		}
		if f.config != w.config {
			bad("%s: config file %v, want %v", name, f.config, w.config)
		}
		if w.src == "" {
			if f.content != nil {
				if err := checkELF(f.content, p.arch); err != nil {
					bad("%s: %v", name, err)
				}
			}
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, w.src))
		if err != nil {
			bad("%v", err)
			continue
		}
		if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != f.sha256 {
			bad("%s is not %s", name, w.src)
		}
		if strings.HasSuffix(name, ".service") {
			if !regexp.MustCompile(`(?m)^ExecStart=/usr/bin/consullock `).Match(src) {
				bad("%s does not run /usr/bin/consullock", name)
			}
			for _, m := range regexp.MustCompile(`(?m)^User=(\S+)$`).FindAllSubmatch(src, -1) {
				if !strings.Contains(p.preinstall, string(m[1])) || !strings.Contains(p.preinstall, "useradd --system") {
					bad("%s runs as %s, which the install script does not create", name, m[1])
				}
			}
		}
	}
	if mode, ok := p.dirs["/etc/consullock"]; !ok || mode != 0o755 {
		bad("no directory /etc/consullock with mode 0755 (got %04o, %v)", mode, ok)
	}
	return out
}

func checkELF(b []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		return fmt.Errorf("an ELF %v for %v, want an executable for %v", f.Type, f.Machine, machine)
	}
	return nil
}

func read(path string) (pkg, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return pkg{}, err
	}
	switch {
	case strings.HasSuffix(path, ".deb"):
		return readDeb(path, b)
	case strings.HasSuffix(path, ".rpm"):
		return readRPM(path, b)
	}
	return pkg{}, errors.New("neither .deb nor .rpm")
}

// readDeb reads an ar archive holding control.tar.gz and data.tar.gz.
func readDeb(path string, b []byte) (pkg, error) {
	p := pkg{path: path, format: "deb", files: map[string]file{}, dirs: map[string]os.FileMode{}}
	if !bytes.HasPrefix(b, []byte("!<arch>\n")) {
		return p, errors.New("not an ar archive")
	}
	members := map[string][]byte{}
	for rest := b[8:]; len(rest) >= 60; {
		name := strings.TrimSuffix(strings.TrimSpace(string(rest[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(rest[48:58])))
		if err != nil || 60+size > len(rest) {
			return p, fmt.Errorf("ar member %q: bad size", name)
		}
		members[name] = rest[60 : 60+size]
		rest = rest[60+size+size%2:]
	}
	control, data := members["control.tar.gz"], members["data.tar.gz"]
	if control == nil || data == nil {
		return p, fmt.Errorf("want control.tar.gz and data.tar.gz, have %v", keys(members))
	}
	ctl := map[string][]byte{}
	if err := eachTar(control, func(h *tar.Header, body []byte) { ctl[strings.TrimPrefix(h.Name, "./")] = body }); err != nil {
		return p, err
	}
	conffiles := strings.Fields(string(ctl["conffiles"]))
	p.preinstall = string(ctl["preinst"])
	for _, line := range strings.Split(string(ctl["control"]), "\n") {
		if v, ok := strings.CutPrefix(line, "Architecture: "); ok {
			p.arch = strings.TrimSpace(v)
		}
	}
	err := eachTar(data, func(h *tar.Header, body []byte) {
		name := "/" + strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/")
		name = strings.TrimSuffix(name, "/")
		switch h.Typeflag {
		case tar.TypeDir:
			p.dirs[name] = os.FileMode(h.Mode).Perm()
		case tar.TypeReg:
			sum := sha256.Sum256(body)
			p.files[name] = file{mode: os.FileMode(h.Mode).Perm(), config: slices.Contains(conffiles, name), sha256: hex.EncodeToString(sum[:]), content: body}
		}
	})
	return p, err
}

func eachTar(gz []byte, fn func(*tar.Header, []byte)) error {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		fn(h, body)
	}
}

// RPM header tags (rpm's lib/rpmtag.h).
const (
	tagPreIn       = 1023
	tagFileModes   = 1030
	tagFileDigests = 1035
	tagFileFlags   = 1037
	tagArch        = 1022
	tagDirIndexes  = 1116
	tagBaseNames   = 1117
	tagDirNames    = 1118
	tagDigestAlgo  = 5011

	fileConfig    = 1 << 0 // RPMFILE_CONFIG
	fileNoReplace = 1 << 4 // RPMFILE_NOREPLACE
	digestSHA256  = 8
)

// readRPM reads the lead, the signature header and the main header; the
// file list, modes, flags and SHA-256 digests are all in the header.
func readRPM(path string, b []byte) (pkg, error) {
	p := pkg{path: path, format: "rpm", files: map[string]file{}, dirs: map[string]os.FileMode{}}
	if len(b) < 96 || !bytes.Equal(b[:4], []byte{0xed, 0xab, 0xee, 0xdb}) {
		return p, errors.New("no rpm lead")
	}
	_, n, err := rpmHeader(b[96:])
	if err != nil {
		return p, fmt.Errorf("signature header: %w", err)
	}
	off := 96 + (n+7)/8*8 // the signature header is padded to 8 bytes
	tags, _, err := rpmHeader(b[off:])
	if err != nil {
		return p, fmt.Errorf("header: %w", err)
	}
	p.arch = map[string]string{"x86_64": "amd64", "aarch64": "arm64"}[tags.str(tagArch)]
	p.preinstall = tags.str(tagPreIn)
	if algo := tags.ints(tagDigestAlgo); len(algo) == 0 || slices.ContainsFunc(algo, func(a int32) bool { return a != digestSHA256 }) {
		return p, fmt.Errorf("file digests are not SHA-256 (algorithm %v)", algo)
	}
	base, dirs, idx := tags.strs(tagBaseNames), tags.strs(tagDirNames), tags.ints(tagDirIndexes)
	modes, flags, digests := tags.ints(tagFileModes), tags.ints(tagFileFlags), tags.strs(tagFileDigests)
	for i, name := range base {
		if i >= len(idx) || i >= len(modes) || i >= len(flags) || i >= len(digests) || int(idx[i]) >= len(dirs) {
			return p, errors.New("file arrays of different lengths")
		}
		full := strings.TrimSuffix(dirs[idx[i]], "/") + "/" + name
		mode := os.FileMode(modes[i] & 0o7777)
		switch modes[i] & 0o170000 {
		case 0o040000:
			p.dirs[full] = mode
		case 0o100000:
			p.files[full] = file{mode: mode, config: flags[i]&(fileConfig|fileNoReplace) == fileConfig|fileNoReplace, sha256: digests[i]}
		}
	}
	return p, nil
}

// rpmTags is a header's index: tag -> (type, count, data).
type rpmTags map[int32]struct {
	typ   uint32
	count int
	data  []byte
}

func rpmHeader(b []byte) (rpmTags, int, error) {
	if len(b) < 16 || !bytes.Equal(b[:3], []byte{0x8e, 0xad, 0xe8}) {
		return nil, 0, errors.New("no header magic")
	}
	nindex, hsize := int(binary.BigEndian.Uint32(b[8:12])), int(binary.BigEndian.Uint32(b[12:16]))
	end := 16 + nindex*16 + hsize
	if end > len(b) {
		return nil, 0, errors.New("truncated")
	}
	store := b[16+nindex*16 : end]
	tags := rpmTags{}
	for i := 0; i < nindex; i++ {
		e := b[16+i*16:]
		tag, typ := int32(binary.BigEndian.Uint32(e[0:4])), binary.BigEndian.Uint32(e[4:8])
		at, count := int(binary.BigEndian.Uint32(e[8:12])), int(binary.BigEndian.Uint32(e[12:16]))
		if at > len(store) {
			return nil, 0, fmt.Errorf("tag %d: offset past the store", tag)
		}
		tags[tag] = struct {
			typ   uint32
			count int
			data  []byte
		}{typ, count, store[at:]}
	}
	return tags, end, nil
}

func (t rpmTags) strs(tag int32) []string {
	e, ok := t[tag]
	if !ok {
		return nil
	}
	parts := strings.SplitN(string(e.data), "\x00", e.count+1)
	return parts[:min(e.count, len(parts))]
}

func (t rpmTags) str(tag int32) string {
	if s := t.strs(tag); len(s) > 0 {
		return s[0]
	}
	return ""
}

// ints reads an INT16 (type 3) or INT32 (type 4) array.
func (t rpmTags) ints(tag int32) []int32 {
	e, ok := t[tag]
	if !ok {
		return nil
	}
	out := make([]int32, 0, e.count)
	for i := 0; i < e.count; i++ {
		switch e.typ {
		case 3:
			out = append(out, int32(binary.BigEndian.Uint16(e.data[2*i:])))
		case 4:
			out = append(out, int32(binary.BigEndian.Uint32(e.data[4*i:])))
		}
	}
	return out
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
