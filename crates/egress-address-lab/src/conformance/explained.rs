//! The differences that stay, each with the shape that shows it and why it is not fixed.
//! docs/testing.md lists the same; a shape here that no longer differs is reported as stale.

/// One explained difference.
#[derive(Debug, Clone, Copy)]
pub struct Explained {
    pub shape: &'static str,
    pub why: &'static str,
}

pub const EXPLAINED: &[Explained] = &[
    Explained {
        shape: "ctl-kube-system",
        why: "kube-system's managedFields name the program that made it: the test control plane \
              runs kube-apiserver inside `testcluster`, so its bootstrap writes are recorded under \
              `testcluster`; in a cluster (and in localplane) they are `kube-apiserver`'s. \
              The rest of the namespace, which the controller reads for its uid, is the same.",
    },
    Explained {
        shape: "ctl-event-create",
        why: "localplane records an Event's field ownership in the core v1 shape it stores \
              (involvedObject, message, source); the apiserver converts the set to the version \
              the writer used (regarding, note, reportingController). The Event itself is the \
              same; only managedFields[].fieldsV1 differs, which nothing in this project reads. \
              Converting field sets between versions is not worth a second ownership model.",
    },
    Explained {
        shape: "ctl-event-series-patch",
        why: "as ctl-event-create: the series patch is the same, its managedFields are recorded \
              in the stored (core v1) shape.",
    },
    Explained {
        shape: "kc-core-events-by-object",
        why: "as ctl-event-create: an Event written through events.k8s.io and read as core v1 \
              (what `kubectl describe` lists) carries managedFields in the shape localplane \
              stores, where the apiserver keeps the writer's events.k8s.io shape.",
    },
    Explained {
        shape: "ctl-whoami",
        why: "the test control plane's token file gives each identity a uid \
              (`testcluster-<name>`), which SelfSubjectReview reports; localplane's identities \
              are tokens without a uid. A property of the credential, not of the server.",
    },
    Explained {
        shape: "ctl-can-i-list",
        why: "the real answer holds the bootstrap policy every authenticated user and service \
              account gets (discovery, health and version URLs, the service-account issuer, \
              ClusterTrustBundles) and orders rules by binding; localplane serves only the \
              roles it is given plus the self reviews. The shipped grants themselves (egressshards \
              get/list/watch/update, events create/patch, namespaces/kube-system get, leases \
              get/create/update in egress-address-system) are the same on both.",
    },
    Explained {
        shape: "py-configmaps-bad-continue",
        why: "both refuse a malformed continue token with 400 BadRequest; the message quotes the \
              Go base64 and JSON decoders' own errors on the garbage (`invalid character '\\u009e' \
              looking for beginning of value`), which localplane does not reproduce byte for byte.",
    },
];

/// Why `shape` differs, when that is explained.
pub fn why(shape: &str) -> Option<&'static str> {
    EXPLAINED.iter().find(|e| e.shape == shape).map(|e| e.why)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_explanation_names_a_shape_of_the_catalogue() {
        let ids: Vec<&str> = super::super::shapes::catalogue()
            .iter()
            .map(|s| s.id)
            .collect();
        for e in super::EXPLAINED {
            assert!(ids.contains(&e.shape), "{} is not a shape", e.shape);
            assert!(!e.why.trim().is_empty(), "{} has no reason", e.shape);
        }
    }
}
