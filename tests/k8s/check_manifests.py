"""deploy/k8s as Kubernetes and Tessera read it (run by tests/k8s/run.sh).

1. Renders the example overlay with `kubectl kustomize` (certificates made by `tessera certs`
   into a copy of it, as its comment tells a user to).
2. Validates every rendered manifest with kubernetes-validate, strictly, for the three newest
   Kubernetes minor versions it knows.
3. For every pod the StatefulSets make (each replica index), does what the kubelet would for the
   container: the environment with its $(VAR) references expanded (TF_CONFIG from the pod's
   index and the cluster ConfigMap), the args likewise, the ConfigMap and Secret volumes as
   directories; then starts the daemon from the build directory with exactly that TF_CONFIG,
   configuration file and certificates (only the listening addresses moved to 127.0.0.1:0 and
   the mount paths to the temporary directories), checks that it took the task and index the
   pod has from TF_CONFIG, and stops it."""
import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import kubernetes_validate
import kubernetes_validate.utils as kvu
import yaml

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ["TESSERA_BUILD_DIR"]


def newest_minors(n=3):
    minors = {}
    for v in kvu.all_versions():
        major, minor = v.split(".")[:2]
        minors[(int(major), int(minor))] = v
    return [minors[k] for k in sorted(minors)[-n:]]


def render(tmp):
    shutil.copytree(os.path.join(SRC, "deploy", "k8s"), os.path.join(tmp, "k8s"))
    overlay = os.path.join(tmp, "k8s", "overlays", "example")
    pki = os.path.join(overlay, "pki")
    tessera = os.path.join(BUILD, "tessera")

    def certs(*args):
        subprocess.run([tessera, "certs"] + list(args), check=True, stdout=subprocess.DEVNULL)

    certs("init", "--dir", pki)
    for i in (0, 1):
        certs("issue", "--dir", pki, "ps", str(i), "--host", "tessera-ps-%d.tessera-ps" % i)
        certs("issue", "--dir", pki, "worker", str(i), "--host",
              "tessera-worker-%d.tessera-worker" % i)
    certs("issue", "--dir", pki, "chief", "0", "--host", "tessera-chief-0.tessera-chief")
    out = subprocess.run(["kubectl", "kustomize", overlay], check=True, capture_output=True,
                         text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def expand(text, env):
    """Kubernetes' $(VAR) expansion: known names replaced, $$ an escaped $, others kept."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def pod_env(container, index, docs):
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
            continue
        src = e["valueFrom"]
        if "fieldRef" in src:
            assert src["fieldRef"]["fieldPath"] == \
                "metadata.labels['apps.kubernetes.io/pod-index']", src
            env[e["name"]] = str(index)
        elif "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            env[e["name"]] = find(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        else:
            raise AssertionError("unexpected env source %s" % src)
    return env


def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError("no %s %s among the rendered manifests" % (kind, name))


def mount_dirs(spec, container, docs, tmp):
    """Each volume mount as a local directory: ConfigMaps and Secrets written out, hostPaths as
    they are, emptyDirs and claims as fresh directories. Returns {mountPath: local dir}."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    out = {}
    for m in container.get("volumeMounts", []):
        v = volumes.get(m["name"], {})
        local = os.path.join(tmp, m["name"])
        if "configMap" in v:
            os.makedirs(local, exist_ok=True)
            for k, text in find(docs, "ConfigMap", v["configMap"]["name"])["data"].items():
                with open(os.path.join(local, k), "w") as f:
                    f.write(text)
        elif "secret" in v:
            os.makedirs(local, exist_ok=True)
            for k, b64 in find(docs, "Secret", v["secret"]["secretName"])["data"].items():
                with open(os.path.join(local, k), "wb") as f:
                    f.write(base64.b64decode(b64))
                os.chmod(os.path.join(local, k), 0o400)
        elif "hostPath" in v:
            local = v["hostPath"]["path"]
        else:  # emptyDir, or a volumeClaimTemplate
            os.makedirs(local, exist_ok=True)
        out[m["mountPath"]] = local
    return out


def relocate(text, mounts):
    """Mount paths (whole path components only) to their local directories, in one pass."""
    alts = "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True))
    pattern = r"(?<![\w/.-])(" + alts + r")(?![\w.-])"
    return re.sub(pattern, lambda m: mounts[m.group(1)], text)


def run_pod(sts, index, docs, tmp):
    spec = sts["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    env = pod_env(c, index, docs)
    mounts = mount_dirs(spec, c, docs, tmp)
    # the configuration file names mount paths too: the copy names the local directories
    for path, local in mounts.items():
        if path.endswith("/config"):
            conf = os.path.join(local, "tessera.yaml")
            with open(conf) as f:
                text = relocate(f.read(), mounts)
            with open(conf, "w") as f:
                f.write(text)
    args = [relocate(expand(a, env), mounts) for a in c["args"]]
    program = os.path.join(BUILD, os.path.basename(c["command"][0]))
    role = os.path.basename(c["command"][0])[len("tessera-"):]
    argv = [program] + args + ["--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
                               "--health-listen=127.0.0.1:0"]
    log = os.path.join(tmp, "log")
    with open(log, "w") as lf:
        proc = subprocess.Popen(argv, env=dict(os.environ, TF_CONFIG=env["TF_CONFIG"]),
                                stdout=lf, stderr=lf)
    started = False
    for _ in range(100):
        text = open(log).read()
        if "main: serving gRPC on" in text or proc.poll() is not None:
            started = proc.poll() is None
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(20)
    text = open(log).read()
    ident = "%s[%d]" % (role, index)
    ok = started and rc == 0 and ident in text and "mutual TLS 1.3" in text
    print("  %-24s TF_CONFIG %s\n  %-24s %s" % (
        "%s pod %d" % (sts["metadata"]["name"], index), env["TF_CONFIG"], "",
        "started as %s with mTLS, stopped cleanly" % ident if ok else "FAILED (exit %s):\n%s"
        % (rc, text)))
    return ok


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        docs = render(tmp)
        versions = newest_minors()
        print("%d manifests rendered; validating for Kubernetes %s" % (len(docs),
                                                                         ", ".join(versions)))
        for d in docs:
            for v in versions:
                try:
                    kubernetes_validate.validate(d, v, strict=True)
                except kubernetes_validate.ValidationError as e:
                    failures += 1
                    print("  %s %s on %s: %s" % (d["kind"], d["metadata"]["name"], v,
                                                 e.message))
        print("  every manifest valid" if failures == 0 else "  %d invalid" % failures)
        print("pods as the kubelet would start them:")
        for sts in [d for d in docs if d["kind"] == "StatefulSet"]:
            for i in range(sts["spec"]["replicas"]):
                with tempfile.TemporaryDirectory(dir=tmp) as pod_tmp:
                    failures += not run_pod(sts, i, docs, pod_tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
