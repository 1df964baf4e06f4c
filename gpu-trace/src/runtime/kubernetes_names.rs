//! A Kubernetes container's namespace, pod and name, from the record its
//! runtime keeps of it: the OCI bundle's config.json, whose annotations the
//! CRI plugin (containerd) or CRI-O wrote when the kubelet created it.
//!
//! The same rules as every other identity: the file must be root's, in the
//! runtime's own directory, under the id the cgroup path gave (checked in
//! its format before); and every name must have Kubernetes' own form (DNS
//! labels and subdomains, a UUID), or none is taken. The bundle is a
//! tenant's pod spec, environment and all, and it is read on the event
//! thread (once per container: identities are cached by cgroup): a bundle
//! over BUNDLE_LIMIT is not read at all, and its container keeps its id.

use std::{collections::BTreeMap, fs, io::Read, os::unix::fs::MetadataExt, path::Path};

use serde::Deserialize;

/// Ten times a typical pod's config.json (20-30 KB); parsed in about a
/// millisecond.
const BUNDLE_LIMIT: u64 = 256 << 10;

/// Where a runtime's annotations keep a pod's names.
pub struct AnnotationKeys {
    pub namespace: &'static str,
    pub pod: &'static str,
    pub pod_uid: &'static str,
    pub container: &'static str,
}

/// containerd's CRI plugin.
pub const CONTAINERD: AnnotationKeys = AnnotationKeys {
    namespace: "io.kubernetes.cri.sandbox-namespace",
    pod: "io.kubernetes.cri.sandbox-name",
    pod_uid: "io.kubernetes.cri.sandbox-uid",
    container: "io.kubernetes.cri.container-name",
};

/// CRI-O.
pub const CRIO: AnnotationKeys = AnnotationKeys {
    namespace: "io.kubernetes.pod.namespace",
    pod: "io.kubernetes.pod.name",
    pod_uid: "io.kubernetes.pod.uid",
    container: "io.kubernetes.container.name",
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNames {
    pub namespace: String,
    pub pod: String,
    /// With dashes, as the API server gives it.
    pub pod_uid: String,
    pub container: String,
}

#[derive(Deserialize)]
struct Bundle {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// The names in the bundle at `config`, if it is root's and every name is
/// in Kubernetes' form.
pub fn from_bundle(config: &Path, keys: &AnnotationKeys) -> Option<PodNames> {
    let file = fs::File::open(config).ok()?;
    let meta = file.metadata().ok()?;
    if meta.uid() != 0 || !meta.is_file() || meta.len() > BUNDLE_LIMIT {
        return None;
    }
    let mut text = String::new();
    file.take(BUNDLE_LIMIT).read_to_string(&mut text).ok()?;
    let bundle: Bundle = serde_json::from_str(&text).ok()?;
    let get = |key: &str| bundle.annotations.get(key).map(String::as_str);
    let names = PodNames {
        namespace: get(keys.namespace).filter(|n| is_dns_label(n))?.to_string(),
        pod: get(keys.pod).filter(|n| is_dns_subdomain(n))?.to_string(),
        pod_uid: get(keys.pod_uid).filter(|u| is_uid(u))?.to_string(),
        container: get(keys.container).filter(|n| is_dns_label(n))?.to_string(),
    };
    Some(names)
}

/// RFC 1123 label, as Kubernetes checks namespaces and container names.
fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// RFC 1123 subdomain, as Kubernetes checks pod names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// A UUID as the API server writes pod UIDs.
fn is_uid(uid: &str) -> bool {
    uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8";

    fn bundle(annotations: &[(&str, &str)]) -> tempfile::NamedTempFile {
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        let spec = serde_json::json!({"ociVersion": "1.0.2", "process": {"env": ["A=b"]}, "annotations": annotations});
        fs::write(file.path(), spec.to_string()).unwrap();
        file
    }

    fn containerd_bundle(pod: &str) -> tempfile::NamedTempFile {
        bundle(&[
            ("io.kubernetes.cri.container-type", "container"),
            ("io.kubernetes.cri.sandbox-namespace", "ml-team"),
            ("io.kubernetes.cri.sandbox-name", pod),
            ("io.kubernetes.cri.sandbox-uid", UID),
            ("io.kubernetes.cri.container-name", "trainer"),
        ])
    }

    #[test]
    fn containerd_and_crio_bundles_name_the_pod() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: the bundle must be root's, and only root makes one");
            return;
        }
        let names = from_bundle(containerd_bundle("train-0").path(), &CONTAINERD).unwrap();
        assert_eq!(
            names,
            PodNames {
                namespace: "ml-team".into(),
                pod: "train-0".into(),
                pod_uid: UID.into(),
                container: "trainer".into(),
            }
        );
        let crio = bundle(&[
            ("io.kubernetes.pod.namespace", "default"),
            ("io.kubernetes.pod.name", "web.example"),
            ("io.kubernetes.pod.uid", UID),
            ("io.kubernetes.container.name", "app"),
        ]);
        assert_eq!(from_bundle(crio.path(), &CRIO).unwrap().pod, "web.example");
        // The other runtime's keys find nothing.
        assert!(from_bundle(crio.path(), &CONTAINERD).is_none());
    }

    #[test]
    fn names_not_in_kubernetes_form_are_not_taken() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: the bundle must be root's, and only root makes one");
            return;
        }
        for pod in ["Train", "a\u{1b}[31m", "x/y", "-a", "", &"a".repeat(254)] {
            assert!(
                from_bundle(containerd_bundle(pod).path(), &CONTAINERD).is_none(),
                "{pod:?}"
            );
        }
        assert!(is_dns_subdomain("a.b-c.d") && !is_dns_subdomain("a..b"));
        assert!(is_uid(UID) && !is_uid("6b1e2a3c4d5e6f708192a3b4c5d6e7f8"));
    }

    #[test]
    fn a_bundle_larger_than_any_pods_is_not_read() {
        let big = bundle(&[("padding", &"x".repeat(BUNDLE_LIMIT as usize))]);
        assert!(from_bundle(big.path(), &CONTAINERD).is_none());
    }
}
