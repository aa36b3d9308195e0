// Package deploycheck checks the deployment examples without a cluster:
// the Kubernetes manifests decode strictly into the Kubernetes API types (a
// misspelt or misplaced field fails), the Nomad job parses as HCL, and each
// keeps the promises its guide makes (replicas, probes, token from a file,
// non-root, metrics discoverable).
package deploycheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

const examplesDir = "../../examples"

// kubeObjects decodes every document of every YAML file under
// examples/kubernetes strictly (unknown fields are errors) into its API type.
func kubeObjects(t *testing.T) []any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(examplesDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under examples/kubernetes: %v", err)
	}
	var objs []any
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(raw) {
			obj, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", filepath.Base(f), i+1, err)
				continue
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

func splitYAML(raw []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(raw, []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func decodeStrict(doc []byte) (any, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return nil, err
	}
	var obj any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "batch/v1 CronJob":
		obj = &batchv1.CronJob{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	default:
		return nil, &unknownKindError{head.APIVersion, head.Kind}
	}
	return obj, yaml.UnmarshalStrict(doc, obj)
}

type unknownKindError struct{ apiVersion, kind string }

func (e *unknownKindError) Error() string {
	return "no API type known to this test for " + e.apiVersion + " " + e.kind + ": add it to decodeStrict"
}

func TestKubernetesManifests_decodeStrictly(t *testing.T) {
	objs := kubeObjects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		switch o.(type) {
		case *appsv1.Deployment:
			kinds["Deployment"]++
		case *corev1.Service:
			kinds["Service"]++
		case *policyv1.PodDisruptionBudget:
			kinds["PodDisruptionBudget"]++
		case *batchv1.CronJob:
			kinds["CronJob"]++
		}
	}
	for _, k := range []string{"Deployment", "Service", "PodDisruptionBudget", "CronJob"} {
		if kinds[k] != 1 {
			t.Errorf("want one %s under examples/kubernetes, have %d", k, kinds[k])
		}
	}
}

func TestKubernetesManifests_controllerDeployment(t *testing.T) {
	var dep *appsv1.Deployment
	var svc *corev1.Service
	var pdb *policyv1.PodDisruptionBudget
	for _, o := range kubeObjects(t) {
		switch o := o.(type) {
		case *appsv1.Deployment:
			dep = o
		case *corev1.Service:
			svc = o
		case *policyv1.PodDisruptionBudget:
			pdb = o
		}
	}
	if dep == nil || svc == nil || pdb == nil {
		t.Fatal("the controller needs a Deployment, a Service and a PodDisruptionBudget")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2 (leader election makes a second replica safe)", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template
	if !matches(dep.Spec.Selector.MatchLabels, pod.Labels) || !matches(svc.Spec.Selector, pod.Labels) ||
		!matches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("the Deployment's, Service's and PDB's selectors must all select the pod labels %v", pod.Labels)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	for name, ann := range map[string]map[string]string{"pod": pod.Annotations, "Service": svc.Annotations} {
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9464" || ann["prometheus.io/path"] != "/metrics" {
			t.Errorf("%s annotations %v: want prometheus.io/scrape, port 9464 and path /metrics", name, ann)
		}
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if len(c.Args) < 1 || c.Args[0] != "controller" || !slices.Contains(c.Args, "-listen") ||
		c.Args[slices.Index(c.Args, "-listen")+1] != ":9464" {
		t.Errorf("args %q: want `controller ... -listen :9464`", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Name == "CONSUL_HTTP_TOKEN" {
			t.Error("the token must come from a Secret file (CONSUL_HTTP_TOKEN_FILE), not the environment")
		}
	}
	if !strings.Contains(env["CONSUL_HTTP_ADDR"], "consul-server") {
		t.Errorf("CONSUL_HTTP_ADDR %q: want the Consul server Service (agentless)", env["CONSUL_HTTP_ADDR"])
	}
	checkTokenFromSecret(t, env["CONSUL_HTTP_TOKEN_FILE"], c, pod.Spec)
	for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want ||
			(probe.HTTPGet.Port.String() != "metrics" && probe.HTTPGet.Port.IntValue() != 9464) {
			t.Errorf("probe %+v: want an HTTP GET of %s on the metrics port", probe, want)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9464 {
		t.Errorf("ports %+v: want metrics 9464", c.Ports)
	}
	checkResources(t, c)
	checkLockedDown(t, pod.Spec, c)
}

func TestKubernetesManifests_runCronJob(t *testing.T) {
	var cj *batchv1.CronJob
	for _, o := range kubeObjects(t) {
		if o, ok := o.(*batchv1.CronJob); ok {
			cj = o
		}
	}
	if cj == nil {
		t.Fatal("no CronJob")
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	cmd := append(slices.Clone(c.Command), c.Args...)
	dash := slices.Index(cmd, "--")
	if len(cmd) < 4 || !strings.HasSuffix(cmd[0], "consullock") || cmd[1] != "run" || !slices.Contains(cmd, "-lock") ||
		dash < 0 || dash == len(cmd)-1 {
		t.Errorf("command %q: want `consullock run -lock NAME ... -- cmd`", cmd)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	checkTokenFromSecret(t, env["CONSUL_HTTP_TOKEN_FILE"], c, pod)
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds <= 10 {
		t.Errorf("terminationGracePeriodSeconds %v: must exceed the runner's -grace (10s)", pod.TerminationGracePeriodSeconds)
	}
	checkResources(t, c)
	checkLockedDown(t, pod, c)
}

// checkTokenFromSecret: the token file is in a read-only mount of a Secret.
func checkTokenFromSecret(t *testing.T, tokenFile string, c corev1.Container, pod corev1.PodSpec) {
	t.Helper()
	if tokenFile == "" {
		t.Error("CONSUL_HTTP_TOKEN_FILE unset")
		return
	}
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(tokenFile, m.MountPath+"/") {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("mount %s of the token must be read-only", m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName != "" {
				return
			}
		}
	}
	t.Errorf("CONSUL_HTTP_TOKEN_FILE %s is not in a mounted Secret", tokenFile)
}

func checkResources(t *testing.T, c corev1.Container) {
	t.Helper()
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("container %s: want cpu and memory requests and a memory limit, have %+v", c.Name, c.Resources)
	}
}

func checkLockedDown(t *testing.T, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps, sc := pod.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and runAsUser 65532 (the image's user)", ps)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container %s securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", c.Name, sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false: consullock does not talk to the Kubernetes API")
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestNomadControllerJob_parses parses the Nomad job as HCL (no schema: the
// Nomad binary cannot be built here) and checks its shape.
func TestNomadControllerJob_parses(t *testing.T) {
	path := filepath.Join(examplesDir, "nomad", "consullock-controller.nomad.hcl")
	f, diags := hclparse.NewParser().ParseHCLFile(path)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		t.Fatalf("%s: not native HCL syntax (%T)", path, f.Body)
	}
	job := only(t, blocks(body, "job"), "job")
	if attrString(t, job.Body, "type") != "service" {
		t.Error(`job type: want "service"`)
	}
	group := only(t, blocks(job.Body, "group"), "group")
	if attrString(t, group.Body, "count") != "2" {
		t.Error("group count: want 2")
	}
	svc := only(t, blocks(group.Body, "service"), "service")
	if attrString(t, svc.Body, "provider") != "consul" || attrString(t, svc.Body, "port") != "metrics" {
		t.Error(`service: want provider "consul" and port "metrics" (Prometheus consul_sd)`)
	}
	var paths []string
	for _, c := range blocks(svc.Body, "check") {
		paths = append(paths, attrString(t, c.Body, "path"))
	}
	if !slices.Contains(paths, "/healthz") {
		t.Errorf("service checks %v: want one on /healthz", paths)
	}
	task := only(t, blocks(group.Body, "task"), "task")
	env := only(t, blocks(task.Body, "env"), "env")
	if attrString(t, env.Body, "CONSUL_HTTP_TOKEN_FILE") == "" {
		t.Error("env: want CONSUL_HTTP_TOKEN_FILE (the token rendered by the template)")
	}
	if _, ok := env.Body.Attributes["CONSUL_HTTP_TOKEN"]; ok {
		t.Error("env: the token must not be in the job spec")
	}
	tmpl := only(t, blocks(task.Body, "template"), "template")
	if !strings.HasPrefix(attrString(t, tmpl.Body, "destination"), "secrets/") {
		t.Error("template: want the token rendered under secrets/")
	}
	cfg := only(t, blocks(task.Body, "config"), "config")
	if !strings.Contains(exprText(t, cfg.Body, "args"), `"-listen"`) {
		t.Error("config args: want -listen on the metrics port")
	}
}

func blocks(b *hclsyntax.Body, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, blk := range b.Blocks {
		if blk.Type == typ {
			out = append(out, blk)
		}
	}
	return out
}

func only(t *testing.T, bs []*hclsyntax.Block, typ string) *hclsyntax.Block {
	t.Helper()
	if len(bs) != 1 {
		t.Fatalf("want one %s block, have %d", typ, len(bs))
	}
	return bs[0]
}

// attrString evaluates a literal attribute (string, number or a template
// without variables) to text; "" when absent or not a literal.
func attrString(t *testing.T, b *hclsyntax.Body, name string) string {
	t.Helper()
	a, ok := b.Attributes[name]
	if !ok {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return exprText(t, b, name)
	}
	switch {
	case v.Type().FriendlyName() == "string":
		return v.AsString()
	case v.Type().FriendlyName() == "number":
		return v.AsBigFloat().String()
	}
	return ""
}

// exprText is an attribute's source text.
func exprText(t *testing.T, b *hclsyntax.Body, name string) string {
	t.Helper()
	a, ok := b.Attributes[name]
	if !ok {
		return ""
	}
	r := a.Expr.Range()
	src, err := os.ReadFile(r.Filename)
	if err != nil {
		t.Fatal(err)
	}
	return string(r.SliceBytes(src))
}

// TestPrometheusScrapeConfigs_promtool: the scrape configurations the
// deployment guides show are valid Prometheus configuration (promtool
// check config, the pinned Prometheus).
func TestPrometheusScrapeConfigs_promtool(t *testing.T) {
	promtool, err := testenv.ToolPath("PROMTOOL_BIN", "promtool")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"controller/prometheus.yml", "kubernetes/prometheus.yml", "nomad/prometheus.yml"} {
		out, err := exec.Command(promtool, "check", "config", filepath.Join(examplesDir, f)).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check config %s: %v\n%s", f, err, out)
		}
	}
}
