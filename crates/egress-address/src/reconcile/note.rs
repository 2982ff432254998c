//! What a reconcile has to say about a shard, for the runtime to publish as an event.

use egress_api::shard::EgressShard;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use crate::shard::ShardKey;

/// Event reasons.
pub mod reason {
    pub const ADDRESS_ASSIGNED: &str = "AddressAssigned";
    pub const CLAIM_PENDING: &str = "ClaimPending";
    pub const CLAIM_REFUSED: &str = "ClaimRefused";
    pub const UNUSABLE_ANSWER: &str = "UnusableAnswer";
    pub const CLAIM_NAME_COLLISION: &str = "ClaimNameCollision";
    pub const ADDRESS_IN_USE: &str = "AddressInUse";
    pub const ADDRESS_DRIFT: &str = "AddressDrift";
    pub const ASSIGN_REFUSED: &str = "AssignRefused";
}

/// One event's worth of news about a shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub key: ShardKey,
    /// The incarnation and version read, so the event names the object and version it is
    /// about: with the key, all its `regarding` needs. Kept as these two texts rather than a
    /// whole `ObjectReference` (seven strings, four of them the key's and the kind's again): a
    /// rollout holds up to half the outbox, 16,384 notes, while addresses are written.
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    pub fn normal(shard: &EgressShard, reason: &'static str, message: String) -> Self {
        Self::new(shard, false, reason, message)
    }

    pub fn warning(shard: &EgressShard, reason: &'static str, message: String) -> Self {
        Self::new(shard, true, reason, message)
    }

    fn new(shard: &EgressShard, warning: bool, reason: &'static str, message: String) -> Self {
        Self {
            key: ShardKey::of(shard),
            uid: shard.metadata.uid.as_deref().map(Box::from),
            resource_version: shard.metadata.resource_version.as_deref().map(Box::from),
            warning,
            reason,
            message,
        }
    }

    /// The object the event regards, as `Resource::object_ref` names a shard.
    pub fn regarding(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(EgressShard::api_version(&()).into_owned()),
            kind: Some(EgressShard::kind(&()).into_owned()),
            name: Some(self.key.name.to_string()),
            namespace: (!self.key.namespace.is_empty()).then(|| self.key.namespace.to_string()),
            uid: self.uid.as_deref().map(str::to_string),
            resource_version: self.resource_version.as_deref().map(str::to_string),
            field_path: None,
        }
    }

    /// The event's `action`.
    pub fn action(&self) -> &'static str {
        match self.reason {
            reason::ADDRESS_DRIFT => "CheckDrift",
            reason::ADDRESS_ASSIGNED | reason::ASSIGN_REFUSED | reason::ADDRESS_IN_USE => "Assign",
            _ => "Claim",
        }
    }
}
