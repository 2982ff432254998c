//! Following files that change in place (a rotated kubeconfig, a renewed certificate): what
//! their content is now, and what a follower made of each content it saw. A content that failed
//! to load is not tried again until the files change once more, and one that loaded is served
//! until they do.

use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The content of a set of files, to tell a change.
pub type Fingerprint = [u8; 32];

/// What `paths` hold now, as one fingerprint; `None` while any of them cannot be read.
pub fn fingerprint(paths: &[&Path]) -> Option<Fingerprint> {
    let mut hash = Sha256::new();
    for path in paths {
        let bytes = std::fs::read(path).ok()?;
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    Some(hash.finalize().into())
}

/// Waits until the next look is due: `poll` has passed since this was called, or `wake` was
/// notified (a server refused the credential the files hold). `false` once `stop` is cancelled.
pub async fn next_look(stop: &CancellationToken, poll: Duration, wake: Option<&Notify>) -> bool {
    let woken = async {
        match wake {
            Some(wake) => wake.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = stop.cancelled() => false,
        _ = woken => true,
        _ = tokio::time::sleep(poll) => true,
    }
}

/// The content a follower serves, and the last one that failed to load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    loaded: Option<Fingerprint>,
    failed: Option<Fingerprint>,
}

impl Seen {
    /// Serving the content `loaded` (`None`: not loaded from files).
    pub fn serving(loaded: Option<Fingerprint>) -> Self {
        Self {
            loaded,
            failed: None,
        }
    }

    /// The content `now`, if it is worth loading: readable, and neither the one served nor the
    /// one that failed last.
    pub fn fresh(&self, now: Option<Fingerprint>) -> Option<Fingerprint> {
        now.filter(|now| Some(*now) != self.loaded && Some(*now) != self.failed)
    }

    /// Notes how loading the content `now` went, and hands the outcome on.
    pub fn load<T, E>(&mut self, now: Fingerprint, outcome: Result<T, E>) -> Result<T, E> {
        match &outcome {
            Ok(_) => *self = Self::serving(Some(now)),
            Err(_) => self.failed = Some(now),
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_is_loaded_once_and_a_failed_one_not_again_until_it_changes() {
        let (a, b, c) = ([1; 32], [2; 32], [3; 32]);
        let mut seen = Seen::serving(Some(a));
        assert_eq!(seen.fresh(None), None, "unreadable");
        assert_eq!(seen.fresh(Some(a)), None, "served");
        assert_eq!(seen.fresh(Some(b)), Some(b));
        assert_eq!(seen.load(b, Err::<(), _>("bad")), Err("bad"));
        assert_eq!(seen.fresh(Some(b)), None, "failed; waits for a change");
        assert_eq!(seen.load(c, Ok::<_, ()>(7)), Ok(7));
        assert_eq!(seen.fresh(Some(c)), None, "served now");
        assert_eq!(seen.fresh(Some(b)), Some(b), "a change back is tried again");
        assert_eq!(seen.fresh(Some(a)), Some(a));
    }

    #[test]
    fn the_fingerprint_follows_every_file_and_tells_where_one_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (x, y) = (dir.path().join("x"), dir.path().join("y"));
        std::fs::write(&x, "ab").unwrap();
        std::fs::write(&y, "c").unwrap();
        let first = fingerprint(&[&x, &y]);
        assert!(first.is_some());
        std::fs::write(&x, "a").unwrap();
        std::fs::write(&y, "bc").unwrap();
        assert_ne!(
            fingerprint(&[&x, &y]),
            first,
            "the same bytes, split elsewhere"
        );
        std::fs::remove_file(&y).unwrap();
        assert_eq!(fingerprint(&[&x, &y]), None);
    }
}
