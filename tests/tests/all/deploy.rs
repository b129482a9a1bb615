//! `deploy/`: `deploy/validate.sh` passes on the repository's image and manifests (schemas of
//! Kubernetes 1.31 strictly, the settings the cluster relies on, hadolint), and fails, naming
//! each problem, on a copy broken in ways the schemas alone would not catch.

use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("deploy")
}

/// Runs `deploy/validate.sh` on `dir` (its own directory if `None`): success and the output.
fn validate(dir: Option<&Path>) -> (bool, String) {
    let out =
        Command::new("bash").arg(deploy().join("validate.sh")).args(dir).output().expect("bash deploy/validate.sh");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn the_image_and_manifests_validate() {
    let (ok, text) = validate(None);
    assert!(ok, "{text}");
    for stage in ["objects valid", "checks passed", "Dockerfile lint clean", "deploy/validate.sh: all checks passed"] {
        assert!(text.contains(stage), "{stage:?} missing from:\n{text}");
    }
}

#[test]
fn broken_manifests_fail_validation_with_the_reason() {
    let copy = std::env::temp_dir().join(format!("ptc-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("k8s")).unwrap();
    std::fs::copy(deploy().join("Dockerfile"), copy.join("Dockerfile")).unwrap();
    for entry in std::fs::read_dir(deploy().join("k8s")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.join("k8s").join(path.file_name().unwrap())).unwrap();
    }
    let edit = |file: &str, from: &str, to: &str| {
        let path = copy.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no {from:?}");
        std::fs::write(&path, text.replace(from, to)).unwrap();
    };
    // All but the misspelt field pass the schemas, and each would break the cluster.
    edit("k8s/statefulset.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false");
    edit("k8s/statefulset.yaml", "PTC_SHUTDOWN_GRACE_SECS", "PTC_SHUTDOWN_GRACE_SECONDS");
    edit("k8s/statefulset.yaml", "$(POD_NAMESPACE)", "$(NAMESPACE)");
    edit("k8s/services.yaml", "publishNotReadyAddresses: true", "publishNotReadyAddresses: false");
    edit("k8s/pdb.yaml", "  maxUnavailable: 1", "  maxUnavaliable: 1");
    edit("k8s/kustomization.yaml", "  - pvc.yaml\n", "");
    edit("Dockerfile", "\nUSER 10001\n", "\nUSER root\n");

    let (ok, text) = validate(Some(&copy));
    let _ = std::fs::remove_dir_all(&copy);
    assert!(!ok, "{text}");
    for reason in [
        "'maxUnavaliable' was unexpected",
        "readOnlyRootFilesystem is not true",
        "PTC_SHUTDOWN_GRACE_SECONDS is set but ptc-engine does not read it",
        "$(NAMESPACE) is not declared above it",
        "publishNotReadyAddresses is not true",
        "kustomization.yaml does not list pvc.yaml",
        "the last USER is not 10001",
        "DL3002",
        "deploy/validate.sh: FAILED",
    ] {
        assert!(text.contains(reason), "{reason:?} missing from:\n{text}");
    }
}
