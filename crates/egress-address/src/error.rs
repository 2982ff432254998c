//! The library's error type.

use crate::config::Invalid;
use crate::connect;
use crate::ipam::claim::ClaimError;

/// Everything that can go wrong, each with a stable [`metric_label`](Error::metric_label).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is missing or inconsistent; nothing was contacted.
    #[error("{0}")]
    Config(String),
    /// A kubeconfig file could not be read or understood.
    #[error("read the kubeconfig {path:?}: {message}")]
    Kubeconfig { path: String, message: String },
    /// The cell's client could not be built from the environment.
    #[error("reach the cell's API server: {0}")]
    CellConfig(String),
    /// The cell's identity could not be read (set `--cell-id`, or grant `get` on the
    /// `kube-system` namespace).
    #[error("determine the cell's identity: {reason}")]
    CellIdentity {
        reason: String,
        #[source]
        source: Option<kube::Error>,
    },
    /// A shard could not be read live (nothing is released after this).
    #[error("read egress shard {shard:?}: {source}")]
    ReadShard {
        shard: String,
        #[source]
        source: kube::Error,
    },
    /// The claim path failed; the shard is left untouched.
    #[error("claim a public IPv6 address for egress shard {shard:?}: {source}")]
    Claim {
        shard: String,
        #[source]
        source: Box<ClaimError>,
    },
    /// The single update of address, ref and label failed.
    #[error(
        "assign egress shard {shard:?} the address {address} held by {kind} {holder:?}: {source}"
    )]
    Assign {
        shard: String,
        address: String,
        kind: String,
        holder: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// Adding the served label to an addressed shard failed.
    #[error("mark egress shard {shard:?} as serving IPv6: {source}")]
    MarkServed {
        shard: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting the claim of a shard that is gone failed.
    #[error("release the egress address claim {claim:?}: {source}")]
    Release {
        claim: String,
        #[source]
        source: kube::Error,
    },
    /// This instance does not hold the lease; the write was not made.
    #[error("not the leader; the write was not made")]
    NotLeader,
    /// Reading or writing the leader-election Lease failed.
    #[error("leader election on lease {lease:?}: {source}")]
    Lease {
        lease: String,
        #[source]
        source: kube::Error,
    },
    /// An admin server could not listen.
    #[error("listen on {addr}: {source}")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<Invalid> for Error {
    fn from(Invalid(message): Invalid) -> Self {
        Error::Config(message)
    }
}

impl From<connect::Error> for Error {
    fn from(err: connect::Error) -> Self {
        match err {
            connect::Error::Kubeconfig { path, message } => Error::Kubeconfig { path, message },
            connect::Error::CellConfig(message) => Error::CellConfig(message),
            connect::Error::Invalid(message) => Error::Config(message),
        }
    }
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::CellConfig(_) => "cell_config",
            Error::CellIdentity { .. } => "cell_identity",
            Error::ReadShard { .. } => "read_shard",
            Error::Claim { .. } => "claim",
            Error::Assign { .. } => "assign",
            Error::MarkServed { .. } => "mark_served",
            Error::Release { .. } => "release",
            Error::NotLeader => "not_leader",
            Error::Lease { .. } => "lease",
            Error::Bind { .. } => "bind",
        }
    }

    /// The kube error underneath, if any.
    pub fn kube_error(&self) -> Option<&kube::Error> {
        match self {
            Error::Assign { source, .. } => Some(source),
            Error::ReadShard { source, .. }
            | Error::MarkServed { source, .. }
            | Error::Release { source, .. }
            | Error::Lease { source, .. } => Some(source),
            Error::Claim { source, .. } => source.kube_error(),
            Error::CellIdentity { source, .. } => source.as_ref(),
            _ => None,
        }
    }

    /// Whether the failure came from IPAM.
    pub fn is_ipam_error(&self) -> bool {
        matches!(self, Error::Claim { .. } | Error::Release { .. })
    }

    /// Whether the failure came from the cell's API server (not IPAM).
    pub fn is_cell_error(&self) -> bool {
        matches!(
            self,
            Error::ReadShard { .. } | Error::Assign { .. } | Error::MarkServed { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_the_reference_wording() {
        let err = Error::Claim {
            shard: "worker-1".into(),
            source: Box::new(ClaimError::Unbound {
                name: "c".into(),
                phase: "Pending".into(),
            }),
        };
        assert_eq!(
            err.to_string(),
            "claim a public IPv6 address for egress shard \"worker-1\": the address service has allocated nothing for claim \"c\" yet (phase \"Pending\")"
        );
        assert_eq!(err.metric_label(), "claim");
        assert_eq!(Error::NotLeader.metric_label(), "not_leader");
    }
}
