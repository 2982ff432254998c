//! Quota: the most live objects of a resource a project may hold, as Milo's quota admission
//! enforces it on a create (`ResourceQuotaEnforcement`). An object counts from its create until it
//! is gone, so a claim still `Releasing` holds its share; the share comes back the moment the
//! object does (Milo frees it later, once its ResourceClaim is collected).

use crate::error::ApiError;
use crate::hooks::ResourceKey;
use crate::locks;
use crate::store::Store;

use super::Plane;

/// What Milo's quota plugin answers a create over the limit with (`errors.NewForbidden` around
/// its own error, so the message names the object).
const INSUFFICIENT: &str = "Insufficient quota resources available. Review your quota usage and reach out to support if you need additional resources.";

impl Plane {
    /// Sets (or, with `None`, lifts) the most live objects of `res` this plane admits. A create
    /// past it is refused with 403 Forbidden in Milo's words; what is already stored stays.
    pub fn set_quota(&self, res: &ResourceKey, limit: Option<u64>) {
        let mut q = locks::write(&self.0.quotas);
        match limit {
            Some(n) => {
                q.insert(res.clone(), n);
            }
            None => {
                q.remove(res);
            }
        }
    }

    /// The quota on `res`, if one is set.
    pub fn quota(&self, res: &ResourceKey) -> Option<u64> {
        locks::read(&self.0.quotas).get(res).copied()
    }

    /// Every quota set, by resource.
    pub fn quotas(&self) -> Vec<(ResourceKey, u64)> {
        locks::read(&self.0.quotas)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// How many objects of `res` the plane holds now, in every namespace (what a quota counts).
    pub fn live_count(&self, res: &ResourceKey) -> usize {
        self.read().store.range(res, None, None).count()
    }

    /// Refuses a create of `name` that would take `res` past its quota. Runs under the plane's
    /// lock, so two creates cannot both take the last share.
    pub(super) fn check_quota(
        &self,
        store: &Store,
        res: &ResourceKey,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(limit) = self.quota(res) else {
            return Ok(());
        };
        let used = store.range(res, None, None).count() as u64;
        if used < limit {
            return Ok(());
        }
        Err(ApiError::forbidden(
            &res.group,
            &res.plural,
            name,
            INSUFFICIENT,
        ))
    }
}

/// Reads a resource as a quota names it: `<plural>.<group>` (`ipclaims.ipam.miloapis.com`), or a
/// bare plural for the core group (`configmaps`).
pub fn parse_resource(spelled: &str) -> Result<ResourceKey, String> {
    let (plural, group) = spelled.split_once('.').unwrap_or((spelled, ""));
    let valid = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    };
    if !valid(plural) || (!group.is_empty() && !valid(group)) {
        return Err(format!(
            "{spelled:?} is not a resource: write <plural>.<group>, as ipclaims.ipam.miloapis.com"
        ));
    }
    Ok(ResourceKey::new(group, plural))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_resource_is_a_plural_and_its_group() {
        assert_eq!(
            parse_resource("ipclaims.ipam.miloapis.com"),
            Ok(ResourceKey::new("ipam.miloapis.com", "ipclaims"))
        );
        assert_eq!(
            parse_resource("configmaps"),
            Ok(ResourceKey::new("", "configmaps"))
        );
        for bad in ["", "IPClaims.ipam.miloapis.com", "ipclaims/status", ".ipam"] {
            let e = parse_resource(bad).expect_err(bad);
            assert!(e.contains("is not a resource"), "{e}");
        }
    }
}
