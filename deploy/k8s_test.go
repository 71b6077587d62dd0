package deploy_test

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	Port          int    `yaml:"port"`
	ContainerPort int    `yaml:"containerPort"`
	TargetPort    any    `yaml:"targetPort"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path   string `yaml:"path"`
		Port   any    `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

type k8sKeyPath struct {
	Key  string `yaml:"key"`
	Path string `yaml:"path"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom any    `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports          []k8sPort `yaml:"ports"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sObject struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   k8sMeta           `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	Spec       struct {
		// Service
		ClusterIP string    `yaml:"clusterIP"`
		Selector  yaml.Node `yaml:"selector"`
		Ports     []k8sPort `yaml:"ports"`
		// StatefulSet, Deployment
		ServiceName string `yaml:"serviceName"`
		Template    struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name  string       `yaml:"name"`
						Items []k8sKeyPath `yaml:"items"`
					} `yaml:"configMap"`
					Secret *struct {
						SecretName string       `yaml:"secretName"`
						Items      []k8sKeyPath `yaml:"items"`
					} `yaml:"secret"`
					PersistentVolumeClaim *struct {
						ClaimName string `yaml:"claimName"`
					} `yaml:"persistentVolumeClaim"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata k8sMeta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

func k8sObjects(t *testing.T, file string) map[string]*k8sObject {
	t.Helper()
	objs := map[string]*k8sObject{}
	for i, d := range yamlDocs(t, file) {
		var o k8sObject
		if err := d.Decode(&o); err != nil {
			t.Fatalf("%s document %d: %v", file, i+1, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s document %d: apiVersion, kind and metadata.name are required", file, i+1)
		}
		objs[o.Kind+"/"+o.Metadata.Name] = &o
	}
	return objs
}

func mustObj(t *testing.T, file string, objs map[string]*k8sObject, key string) *k8sObject {
	t.Helper()
	o := objs[key]
	if o == nil {
		t.Fatalf("%s: no %s", file, key)
	}
	return o
}

// resolvePort maps a probe/targetPort (name or number) to a container port.
func resolvePort(c *k8sContainer, p any) (int, bool) {
	for _, cp := range c.Ports {
		if fmt.Sprint(p) == cp.Name || fmt.Sprint(p) == fmt.Sprint(cp.ContainerPort) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func containerPort(t *testing.T, where string, c *k8sContainer, name string) int {
	t.Helper()
	for _, cp := range c.Ports {
		if cp.Name == name {
			return cp.ContainerPort
		}
	}
	t.Errorf("%s: container %s has no port named %q", where, c.Name, name)
	return -1
}

// checkWorkload checks probes, Services and labels of a pod template;
// httpPort is the port the probes must use.
func checkWorkload(t *testing.T, file string, objs map[string]*k8sObject, w *k8sObject, c *k8sContainer, component string, httpPort int, httpTLS bool) {
	where := fmt.Sprintf("%s %s/%s", file, w.Kind, w.Metadata.Name)
	if !w.Spec.Template.Spec.SecurityContext.RunAsNonRoot || w.Spec.Template.Spec.SecurityContext.RunAsUser == 0 {
		t.Errorf("%s: spec.template.spec.securityContext must run as non-root (runAsNonRoot, runAsUser ≠ 0)", where)
	}
	for kind, pr := range map[string]struct {
		p    *k8sProbe
		path string
	}{"livenessProbe": {c.LivenessProbe, "/healthz"}, "readinessProbe": {c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: container %s: %s.httpGet missing", where, c.Name, kind)
			continue
		}
		if pr.p.HTTPGet.Path != pr.path {
			t.Errorf("%s: %s.httpGet.path = %q, want %s", where, kind, pr.p.HTTPGet.Path, pr.path)
		}
		if p, ok := resolvePort(c, pr.p.HTTPGet.Port); !ok || p != httpPort {
			t.Errorf("%s: %s.httpGet.port %v is not the HTTP listener's port %d", where, kind, pr.p.HTTPGet.Port, httpPort)
		}
		checkProbeScheme(t, where+" "+kind+".httpGet", pr.p.HTTPGet.Scheme, httpTLS)
		checkProbePath(t, where+" "+kind, component, pr.p.HTTPGet.Path)
	}
	podLabels := w.Spec.Template.Metadata.Labels
	services := 0
	for key, o := range objs {
		if o.Kind != "Service" {
			continue
		}
		var sel map[string]string
		if err := o.Spec.Selector.Decode(&sel); err != nil {
			t.Errorf("%s %s: spec.selector: %v", file, key, err)
			continue
		}
		match := len(sel) > 0
		for k, v := range sel {
			if podLabels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		services++
		for _, sp := range o.Spec.Ports {
			tp := sp.TargetPort
			if tp == nil {
				tp = sp.Port
			}
			cp, ok := resolvePort(c, tp)
			if !ok {
				t.Errorf("%s %s: port %s targetPort %v is not a port of container %s", file, key, sp.Name, tp, c.Name)
			} else if cp != sp.Port {
				t.Errorf("%s %s: port %s is %d but forwards to %d; keep the well-known port", file, key, sp.Name, sp.Port, cp)
			}
		}
	}
	if services == 0 {
		t.Errorf("%s: no Service selects the pod labels %v", where, podLabels)
	}
	var sel struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	w.Spec.Selector.Decode(&sel)
	for k, v := range sel.MatchLabels {
		if podLabels[k] != v {
			t.Errorf("%s: spec.selector.matchLabels %s=%s does not match the pod template", where, k, v)
		}
	}
}

// mountFor finds the volume mount containing p.
func mountFor(c *k8sContainer, p string) (name, mountPath string, ok bool) {
	for _, m := range c.VolumeMounts {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			if len(m.MountPath) > len(mountPath) {
				name, mountPath, ok = m.Name, m.MountPath, true
			}
		}
	}
	return
}

// k8sSandbox provides what the pod's volume mounts hold: the keys of
// ConfigMaps of the same file, and the items of Secrets (a Secret's keys
// are not in the manifest: its volume lists them as items, which also
// documents what `kubectl create secret` must put in it).
func k8sSandbox(t *testing.T, file string, objs map[string]*k8sObject, w *k8sObject, c *k8sContainer) *sandbox {
	t.Helper()
	where := fmt.Sprintf("%s %s/%s", file, w.Kind, w.Metadata.Name)
	sb := newSandbox(t)
	for _, m := range c.VolumeMounts {
		for _, v := range w.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				cm := mustObj(t, file, objs, "ConfigMap/"+v.ConfigMap.Name)
				items := v.ConfigMap.Items
				if len(items) == 0 {
					for k := range cm.Data {
						items = append(items, k8sKeyPath{Key: k, Path: k})
					}
				}
				for _, it := range items {
					data, ok := cm.Data[it.Key]
					if !ok {
						t.Errorf("%s: volume %s: ConfigMap %s has no key %q", where, v.Name, v.ConfigMap.Name, it.Key)
					}
					if m.SubPath != "" {
						if m.SubPath == it.Path {
							sb.provide(m.MountPath, []byte(data))
						}
						continue
					}
					sb.provide(path.Join(m.MountPath, it.Path), []byte(data))
				}
			case v.Secret != nil:
				if len(v.Secret.Items) == 0 {
					t.Errorf("%s: volume %s: Secret %s: list its keys as items (what the files are named, what kubectl create secret must write)", where, v.Name, v.Secret.SecretName)
				}
				for _, it := range v.Secret.Items {
					if m.SubPath != "" {
						if m.SubPath == it.Path {
							sb.provide(m.MountPath, materialFor(t, where, it.Key))
						}
						continue
					}
					sb.provide(path.Join(m.MountPath, it.Path), materialFor(t, where, it.Key))
				}
			}
		}
	}
	return sb
}

// containerEnv is the container's environment; values from Secrets and
// fields are placeholders.
func containerEnv(c *k8sContainer) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.Value == "" {
			env[e.Name] = placeholder(e.Name)
		}
	}
	return env
}

// TestK8s checks deploy/k8s/edge.yaml and deploy/k8s/cloud.yaml.
func TestK8s(t *testing.T) {
	const ef, cf = "k8s/edge.yaml", "k8s/cloud.yaml"
	edge := k8sObjects(t, ef)
	cloud := k8sObjects(t, cf)

	// ---- edge ----
	sts := mustObj(t, ef, edge, "StatefulSet/tributary-edge")
	where := ef + " StatefulSet/tributary-edge"
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want one container", where)
	}
	c := &sts.Spec.Template.Spec.Containers[0]
	if len(c.Command) > 0 {
		t.Errorf("%s: container command overrides the image's ENTRYPOINT (tributary); use args", where)
	}
	sub, vals := checkArgs(t, where+" args", c.Args)
	if sub != "edge" {
		t.Fatalf("%s: args run %q, want edge", where, sub)
	}
	cfgPath := vals["config"]
	vol, mp, ok := mountFor(c, cfgPath)
	if !ok {
		t.Fatalf("%s: -config %s is on no volume mount", where, cfgPath)
	}
	var cmName string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	if cmName == "" {
		t.Fatalf("%s: -config %s: volume %q (at %s) is not a ConfigMap", where, cfgPath, vol, mp)
	}
	cm := mustObj(t, ef, edge, "ConfigMap/"+cmName)
	key := strings.TrimPrefix(strings.TrimPrefix(cfgPath, mp), "/")
	raw, ok := cm.Data[key]
	if !ok {
		t.Fatalf("%s: -config %s: ConfigMap %s has no key %q", where, cfgPath, cmName, key)
	}
	env := containerEnv(c)
	env["POD_NAME"], env["POD_NAMESPACE"] = "tributary-edge-0", "default"
	esb := k8sSandbox(t, ef, edge, sts, c)
	cfg := checkEdgeStarts(t, ef+" ConfigMap/"+cmName+" data."+key, esb, raw, env, "volume mount")
	cmWhere := ef + " ConfigMap/" + cmName + " " + key

	// listeners ↔ container ports
	for _, l := range []struct{ field, addr, port string }{
		{"mqtt.addr", cfg.MQTT.Addr, "mqtt"}, {"kafka.addr", cfg.Kafka.Addr, "kafka"}, {"http_addr", cfg.HTTPAddr, "http"},
	} {
		if l.addr == "" {
			t.Errorf("%s: %s is off; the Service exposes %s", cmWhere, l.field, l.port)
			continue
		}
		checkNotLoopback(t, cmWhere+" "+l.field, l.addr)
		if p, cp := portOf(t, cmWhere+" "+l.field, l.addr), containerPort(t, where, c, l.port); p != cp {
			t.Errorf("%s: %s port %d ≠ containerPort %s %d", cmWhere, l.field, p, l.port, cp)
		}
	}
	if cfg.MQTT.WSAddr != "" || cfg.CatalogAddr != "" {
		t.Errorf("%s: mqtt.ws_addr/catalog_addr are on but have no container port", cmWhere)
	}
	// data on the claim template
	var claims []string
	for _, vct := range sts.Spec.VolumeClaimTemplates {
		claims = append(claims, vct.Metadata.Name)
	}
	for field, p := range map[string]string{"data_dir": cfg.DataDir, "wal.path": cfg.WAL.Path} {
		name, _, ok := mountFor(c, p)
		found := false
		for _, cl := range claims {
			found = found || (ok && cl == name)
		}
		if !found {
			t.Errorf("%s: %s %s is not on a volumeClaimTemplate (%v) mount: the WAL would not survive a restart", cmWhere, field, p, claims)
		}
	}
	if g := sts.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || float64(*g) <= cfg.ShutdownTimeout.Seconds() {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed shutdown_timeout (%s)", where, cfg.ShutdownTimeout)
	}
	hl := mustObj(t, ef, edge, "Service/"+sts.Spec.ServiceName)
	if hl.Spec.ClusterIP != "None" {
		t.Errorf("%s: serviceName %s must be a headless Service (clusterIP: None)", where, sts.Spec.ServiceName)
	}
	if adv := cfg.Kafka.AdvertisedAddr; !strings.Contains(adv, "tributary-edge-0."+sts.Spec.ServiceName+".") {
		t.Errorf("%s: kafka.advertised_addr %q is not the pod's DNS name under Service %s", cmWhere, adv, sts.Spec.ServiceName)
	}
	checkWorkload(t, ef, edge, sts, c, "edge", containerPort(t, where, c, "http"), cfg.Security.TLS.On("http"))
	if cfg.Security.TLS.On("http") {
		checkEdgeTLSProbes(t, where+" probes", esb, raw, env, "/healthz", "/readyz")
	}

	// ---- cloud ----
	dep := mustObj(t, cf, cloud, "Deployment/tributary-cloud")
	cwhere := cf + " Deployment/tributary-cloud"
	cc := &dep.Spec.Template.Spec.Containers[0]
	csub, cvals := checkArgs(t, cwhere+" args", cc.Args)
	if csub != "cloud" {
		t.Fatalf("%s: args run %q, want cloud", cwhere, csub)
	}
	csb := k8sSandbox(t, cf, cloud, dep, cc)
	cchk := checkCloudStarts(t, cwhere+" args", csb, cc.Args, containerEnv(cc), "volume mount")
	catAddr := flagOr(t, "cloud", cvals, "catalog-addr")
	checkNotLoopback(t, cwhere+" --catalog-addr", catAddr)
	catPort := portOf(t, cwhere, catAddr)
	if cp := containerPort(t, cwhere, cc, "catalog"); cp != catPort {
		t.Errorf("%s: --catalog-addr port %d ≠ containerPort catalog %d", cwhere, catPort, cp)
	}
	if _, _, ok := mountFor(cc, flagOr(t, "cloud", cvals, "data")); !ok {
		t.Errorf("%s: --data %s is on no volume mount", cwhere, cvals["data"])
	}
	checkWorkload(t, cf, cloud, dep, cc, "cloud", catPort, cchk.tlsOn("rest"))
	if cchk.tlsOn("rest") {
		checkCloudTLSProbes(t, cwhere+" probes", csb, cc.Args, containerEnv(cc), "/healthz", "/readyz")
	}

	// ---- edge ↔ cloud ----
	u, err := url.Parse(cfg.Catalog.URI)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		t.Fatalf("%s: catalog.uri %q: want the cloud's https:// (or http://) address", cmWhere, cfg.Catalog.URI)
	}
	svc := mustObj(t, cf, cloud, "Service/"+u.Hostname())
	if len(svc.Spec.Ports) == 0 || fmt.Sprint(svc.Spec.Ports[0].Port) != u.Port() {
		t.Errorf("%s: catalog.uri %s: Service %s does not serve port %s", cmWhere, cfg.Catalog.URI, u.Hostname(), u.Port())
	}
	if w := flagOr(t, "cloud", cvals, "warehouse"); w != cfg.Catalog.Warehouse {
		t.Errorf("%s: catalog.warehouse %q ≠ the cloud's --warehouse %q (%s)", cmWhere, cfg.Catalog.Warehouse, w, cwhere)
	}
	// The edge writes marks and owners: it must commit as a principal the
	// cloud lets write them (catalog.credential), or with its node token.
	hasNodeTok := false
	for _, e := range cc.Env {
		hasNodeTok = hasNodeTok || e.Name == "TRIBUTARY_NODE_TOKEN"
	}
	_, nodeTokFlag := cvals["node-token"]
	checkEdgeToCloud(t, cmWhere, cfg, cchk, hasNodeTok || nodeTokFlag)
}
