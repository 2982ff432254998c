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
    /// The shard as read, so the event names the object and version it is about. Boxed: a
    /// rollout holds thousands of notes in the events' outbox, whose slots would otherwise each
    /// be the size of this reference, taken or not.
    pub regarding: Box<ObjectReference>,
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
            regarding: Box::new(shard.object_ref(&())),
            warning,
            reason,
            message,
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
