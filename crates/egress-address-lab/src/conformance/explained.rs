//! The differences that stay, each pinned to the shape that shows it and to the JSON paths that
//! differ, with why it is not fixed. Everything else in the shape's answers is still compared: a
//! difference at any other path is unexplained. docs/testing.md lists the same; an explanation
//! whose paths no longer differ is reported as stale.

use super::compare::Difference;

/// One explained difference: a shape, the paths where its answers may differ, and why.
#[derive(Debug, Clone, Copy)]
pub struct Explained {
    pub shape: &'static str,
    /// Paths as [`Difference::path`] names them, `[*]` standing for any index; a difference at
    /// a path or below it is explained.
    pub paths: &'static [&'static str],
    pub why: &'static str,
}

pub const EXPLAINED: &[Explained] = &[
    Explained {
        shape: "ctl-kube-system",
        paths: &[".body.metadata.managedFields[*].manager"],
        why: "kube-system's managedFields name the program that made it: the test control plane \
              runs kube-apiserver inside `testcluster`, so its bootstrap writes are recorded under \
              `testcluster`; in a cluster (and in localplane) they are `kube-apiserver`'s. \
              The rest of the namespace, which the controller reads for its uid, is compared.",
    },
    Explained {
        shape: "ctl-can-i-list",
        paths: &[
            ".body.status.resourceRules[*]",
            ".body.status.nonResourceRules[*]",
        ],
        why: "the real answer holds the bootstrap policy every authenticated user and service \
              account gets (discovery, health and version URLs, the service-account issuer, \
              ClusterTrustBundles) and orders rules by binding; localplane serves only the \
              roles it is given plus the self reviews. The shipped grants themselves (egressshards \
              get/list/watch/update, events create/patch, namespaces/kube-system get, leases \
              get/create/update in egress-address-system) are the same on both.",
    },
    Explained {
        shape: "seq-configmaps-watch-compacted",
        paths: &[".body.steps[*].events[*].object.message"],
        why: "both end the watch with an ERROR event of a 410 Expired Status; its message is worded \
              by whichever layer served the watch: the apiserver's watch cache (`too old resource \
              version: N (M)`, what localplane says for every resource, and what the controller's \
              shard watch meets, the cache serving EgressShards: seq-shards-watch-too-old is the \
              same on both) or etcd for a resource without a cache (`The resourceVersion for the \
              provided watch is too old.`; the comparison's ConfigMaps). localplane has one \
              history, so one wording; clients read the code and reason.",
    },
];

/// The explanation of `shape`, if it has one.
pub fn of(shape: &str) -> Option<&'static Explained> {
    EXPLAINED.iter().find(|e| e.shape == shape)
}

impl Explained {
    /// Whether `d` is one of the differences this explanation pins.
    pub fn covers(&self, d: &Difference) -> bool {
        self.paths.iter().any(|p| path_matches(p, &d.path))
    }
}

/// Whether `path` is `pattern` or below it, `[*]` in the pattern standing for any `[n]`.
fn path_matches(pattern: &str, path: &str) -> bool {
    let mut pattern = pattern.as_bytes();
    let mut path = path.as_bytes();
    loop {
        if pattern.is_empty() {
            return path.is_empty() || path[0] == b'.' || path[0] == b'[';
        }
        if let Some(rest) = pattern.strip_prefix(b"[*]") {
            let Some(after) = path.strip_prefix(b"[") else {
                return false;
            };
            let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
            let Some(after) = after[digits..].strip_prefix(b"]") else {
                return false;
            };
            if digits == 0 {
                return false;
            }
            pattern = rest;
            path = after;
            continue;
        }
        match path.first() {
            Some(b) if *b == pattern[0] => {
                pattern = &pattern[1..];
                path = &path[1..];
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_explanation_names_a_shape_of_the_catalogue_and_pins_paths() {
        let ids: Vec<&str> = super::super::shapes::catalogue()
            .iter()
            .map(|s| s.id)
            .chain(super::super::scenarios::catalogue().iter().map(|s| s.id))
            .collect();
        for e in EXPLAINED {
            assert!(ids.contains(&e.shape), "{} is not a shape", e.shape);
            assert!(!e.why.trim().is_empty(), "{} has no reason", e.shape);
            assert!(!e.paths.is_empty(), "{} pins no path", e.shape);
            for p in e.paths {
                assert!(
                    p.starts_with(".body.") || p.starts_with(".facts.") || *p == ".code",
                    "{} pins {p}, not a path inside an answer",
                    e.shape
                );
                assert_ne!(*p, ".body", "{} pins the whole body", e.shape);
            }
        }
        assert!(EXPLAINED.len() <= 5, "at most five explained differences");
    }

    #[test]
    fn a_pinned_path_covers_itself_any_index_and_what_is_below_it_only() {
        assert!(path_matches(".body.a[*].b", ".body.a[3].b"));
        assert!(path_matches(".body.a[*].b", ".body.a[12].b.c"));
        assert!(path_matches(".body.a[*].b", ".body.a[0].b[2]"));
        assert!(path_matches(".body.message", ".body.message"));
        assert!(!path_matches(".body.message", ".body.messages"));
        assert!(!path_matches(".body.a[*].b", ".body.a[x].b"));
        assert!(!path_matches(".body.a[*].b", ".body.a[].b"));
        assert!(!path_matches(".body.a[*].b", ".body.a.b"));
        assert!(!path_matches(".body.a[*].b", ".body"));
        assert!(!path_matches(".body.a", ".code"));
    }
}
