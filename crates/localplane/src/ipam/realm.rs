//! The project planes one IPAM serves, as one service. Milo keeps every project in one database,
//! so a claim in one project can allocate from a pool of another (through a class's
//! `spec.source`). Here each project is its own plane; the planes of a realm form a
//! [`WriteGroup`], so a write on one may write another inside it without deadlocking.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, Weak};

use super::ctx::{Projects, Remote};
use crate::locks;
use crate::plane::{Plane, WeakPlane, WriteGroup};

#[derive(Default)]
pub struct Realm {
    group: WriteGroup,
    members: RwLock<BTreeMap<String, Member>>,
}

/// Held weakly: the planes hold their hooks, and the hooks hold the realm.
struct Member {
    plane: WeakPlane,
    hooks: Weak<dyn Remote>,
}

impl Realm {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds a project's plane and the hooks serving IPAM on it.
    pub fn join<H: Remote + 'static>(&self, project: &str, plane: &Plane, hooks: &Arc<H>) {
        plane.join_group(&self.group);
        let hooks: Weak<H> = Arc::downgrade(hooks);
        locks::write(&self.members).insert(
            project.to_string(),
            Member {
                plane: plane.downgrade(),
                hooks,
            },
        );
    }
}

impl Projects for Realm {
    fn member(&self, project: &str) -> Option<(Plane, Arc<dyn Remote>)> {
        let members = locks::read(&self.members);
        let m = members.get(project)?;
        Some((m.plane.upgrade()?, m.hooks.upgrade()?))
    }
}
