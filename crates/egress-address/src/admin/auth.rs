//! `/metrics` for callers the cell vouches for (`--metrics-secure`), as controller-runtime's
//! secure metrics server admits them: the request's bearer token is reviewed by the cell
//! (TokenReview), and the user it names must be allowed `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview). No token, or one the cell does not know, is a 401; a user without the
//! permission, a 403; a review the cell did not answer, a 503 (the caller's credential is not
//! known to be bad, so it is neither of the others).
//!
//! Each token's answer is kept for a short while, an allowed one for [`ALLOWED_TTL`] and a
//! refused one for [`DENIED_TTL`] (so a grant or a fixed token takes effect soon), in a cache of at
//! most [`CACHE_CAPACITY`] answers: a scraper every 15 s costs the cell two reviews a minute. The
//! cache is keyed by the token's SHA-256; the token itself is never stored, logged, or put into an
//! error. A review that failed is not kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::metrics_response;
use crate::metrics::Metrics;

/// The one path the secure listener serves.
pub const METRICS_PATH: &str = "/metrics";
/// The verb a scraper must be allowed on [`METRICS_PATH`] (what a GET is to the authorizer).
pub const METRICS_VERB: &str = "get";
/// How long an allowed answer is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refusal (401 or 403) is reused.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// At most this many answers are kept.
pub const CACHE_CAPACITY: usize = 1024;
/// Reviews sent to the cell at once; more requests wait their turn, so a flood of made-up tokens
/// costs the cell a steady trickle, not a burst.
const REVIEWS_IN_FLIGHT: usize = 4;
/// The longest one review may take before the request is answered 503.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Who the cell says a token is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// How a request for `/metrics` is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed(User),
    /// No bearer token, or one the cell does not know.
    Unauthenticated,
    /// The cell knows the user, who may not `get` `/metrics`.
    Forbidden(User),
}

impl Verdict {
    pub fn status(&self) -> StatusCode {
        match self {
            Verdict::Allowed(_) => StatusCode::OK,
            Verdict::Unauthenticated => StatusCode::UNAUTHORIZED,
            Verdict::Forbidden(_) => StatusCode::FORBIDDEN,
        }
    }

    /// The `result` label of `egress_address_metrics_auth_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Allowed(_) => "allowed",
            Verdict::Unauthenticated => "unauthenticated",
            Verdict::Forbidden(_) => "forbidden",
        }
    }

    fn ttl(&self) -> Duration {
        match self {
            Verdict::Allowed(_) => ALLOWED_TTL,
            Verdict::Unauthenticated | Verdict::Forbidden(_) => DENIED_TTL,
        }
    }
}

/// A review the cell did not answer. None of these carries the token.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the cell did not review the bearer token (TokenReview): {0}")]
    TokenReview(#[source] kube::Error),
    #[error(
        "the cell did not review whether user {user:?} may get /metrics (SubjectAccessReview): {source}"
    )]
    AccessReview {
        user: String,
        #[source]
        source: kube::Error,
    },
    #[error("the cell did not answer the {review} within {timeout:?}")]
    TimedOut {
        review: &'static str,
        timeout: Duration,
    },
}

impl ReviewError {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ReviewError::TokenReview(_) => "token_review",
            ReviewError::AccessReview { .. } => "access_review",
            ReviewError::TimedOut { .. } => "timeout",
        }
    }
}

/// The two questions put to the cell. The controller asks them with its cell client; tests
/// answer them without a server.
pub trait Reviews: Send + Sync + 'static {
    /// Who `token` is, or `None` when the cell does not authenticate it.
    fn review_token(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<User>, ReviewError>> + Send;

    /// Whether `user` may `verb` the non-resource URL `path`.
    fn may(
        &self,
        user: &User,
        verb: &str,
        path: &str,
    ) -> impl Future<Output = Result<bool, ReviewError>> + Send;
}

impl Reviews for kube::Client {
    async fn review_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
        let asked = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                // The API server's own audiences, which a service account token is issued for.
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.clone())
            .create(&PostParams::default(), &asked)
            .await
            .map_err(ReviewError::TokenReview)?;
        Ok(user_of(answer.status))
    }

    async fn may(&self, user: &User, verb: &str, path: &str) -> Result<bool, ReviewError> {
        let asked = SubjectAccessReview {
            spec: access_review_spec(user, verb, path),
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.clone())
            .create(&PostParams::default(), &asked)
            .await
            .map_err(|source| ReviewError::AccessReview {
                user: user.name.clone(),
                source,
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// The user a TokenReview's status names, if it authenticated the token as someone.
fn user_of(
    status: Option<k8s_openapi::api::authentication::v1::TokenReviewStatus>,
) -> Option<User> {
    let status = status?;
    if status.authenticated != Some(true) {
        return None;
    }
    let info = status.user?;
    let name = info.username.filter(|n| !n.is_empty())?;
    Some(User {
        name,
        uid: info.uid.filter(|u| !u.is_empty()),
        groups: info.groups.unwrap_or_default(),
        extra: info.extra.unwrap_or_default(),
    })
}

/// The question about `user` exactly as the token review named them: groups and extras decide
/// as much as the name does.
fn access_review_spec(user: &User, verb: &str, path: &str) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: Some(user.name.clone()),
        uid: user.uid.clone(),
        groups: Some(user.groups.clone()),
        extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(path.to_string()),
            verb: Some(verb.to_string()),
        }),
        resource_attributes: None,
    }
}

/// The bearer token of a request, read as the API server reads it: `Authorization: Bearer
/// <token>`, the scheme in any case, one space, a token that is not empty.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// What the cache keeps in a token's place.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct TokenKey([u8; 32]);

impl TokenKey {
    fn of(token: &str) -> TokenKey {
        TokenKey(Sha256::digest(token.as_bytes()).into())
    }
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey(sha256:{}…)", hex::encode(&self.0[..4]))
    }
}

/// Answers by token, each until it expires; at most `capacity` of them.
#[derive(Debug)]
struct Cache {
    answers: HashMap<TokenKey, (Verdict, Instant)>,
    capacity: usize,
}

impl Cache {
    fn new(capacity: usize) -> Cache {
        Cache {
            answers: HashMap::new(),
            capacity,
        }
    }

    fn get(&mut self, key: &TokenKey, now: Instant) -> Option<Verdict> {
        match self.answers.get(key) {
            Some((verdict, until)) if *until > now => Some(verdict.clone()),
            Some(_) => {
                self.answers.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `verdict` for its time to live. A full cache first drops what has expired, then the
    /// answer closest to expiring, which is a refusal before any allowed answer of the same age:
    /// a flood of made-up tokens pushes out other made-up tokens first.
    fn put(&mut self, key: TokenKey, verdict: Verdict, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        if self.answers.len() >= self.capacity && !self.answers.contains_key(&key) {
            self.answers.retain(|_, (_, until)| *until > now);
        }
        while self.answers.len() >= self.capacity && !self.answers.contains_key(&key) {
            let Some(soonest) = self
                .answers
                .iter()
                .min_by_key(|(_, (_, until))| *until)
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.answers.remove(&soonest);
        }
        let until = now + verdict.ttl();
        self.answers.insert(key, (verdict, until));
    }

    fn len(&self) -> usize {
        self.answers.len()
    }
}

/// Decides who may read `/metrics`, with the cell's reviews and a cache of their answers.
pub struct MetricsAuth<R = kube::Client> {
    reviews: R,
    cache: Mutex<Cache>,
    in_flight: Semaphore,
    metrics: Metrics,
}

impl<R: Reviews> MetricsAuth<R> {
    pub fn new(reviews: R, metrics: Metrics) -> Self {
        Self {
            reviews,
            cache: Mutex::new(Cache::new(CACHE_CAPACITY)),
            in_flight: Semaphore::new(REVIEWS_IN_FLIGHT),
            metrics,
        }
    }

    /// The verdict on a request with these headers; counted in
    /// `egress_address_metrics_auth_total`.
    pub async fn check(&self, headers: &HeaderMap) -> Result<Verdict, ReviewError> {
        let Some(token) = bearer_token(headers) else {
            self.metrics.metrics_auth("unauthenticated", "header");
            return Ok(Verdict::Unauthenticated);
        };
        let key = TokenKey::of(token);
        if let Some(verdict) = self.cached(&key) {
            self.metrics.metrics_auth(verdict.label(), "cache");
            return Ok(verdict);
        }
        let _turn = self.in_flight.acquire().await;
        // While this request waited its turn, another with the same token may have been reviewed.
        if let Some(verdict) = self.cached(&key) {
            self.metrics.metrics_auth(verdict.label(), "cache");
            return Ok(verdict);
        }
        match self.review(token).await {
            Ok(verdict) => {
                crate::sync::lock(&self.cache).put(key, verdict.clone(), Instant::now());
                self.metrics.metrics_auth(verdict.label(), "review");
                Ok(verdict)
            }
            Err(err) => {
                self.metrics.metrics_auth("error", "review");
                Err(err)
            }
        }
    }

    fn cached(&self, key: &TokenKey) -> Option<Verdict> {
        crate::sync::lock(&self.cache).get(key, Instant::now())
    }

    async fn review(&self, token: &str) -> Result<Verdict, ReviewError> {
        let user = within("TokenReview", self.reviews.review_token(token)).await?;
        let Some(user) = user else {
            return Ok(Verdict::Unauthenticated);
        };
        let allowed = within(
            "SubjectAccessReview",
            self.reviews.may(&user, METRICS_VERB, METRICS_PATH),
        )
        .await?;
        Ok(if allowed {
            Verdict::Allowed(user)
        } else {
            Verdict::Forbidden(user)
        })
    }

    /// Answers kept now (for tests and the bound's check).
    pub fn cached_answers(&self) -> usize {
        crate::sync::lock(&self.cache).len()
    }
}

async fn within<T>(
    review: &'static str,
    asked: impl Future<Output = Result<T, ReviewError>>,
) -> Result<T, ReviewError> {
    tokio::time::timeout(REVIEW_TIMEOUT, asked)
        .await
        .map_err(|_| ReviewError::TimedOut {
            review,
            timeout: REVIEW_TIMEOUT,
        })?
}

struct SecureState<R> {
    auth: Arc<MetricsAuth<R>>,
    registry: Arc<Registry>,
}

impl<R> Clone for SecureState<R> {
    fn clone(&self) -> Self {
        Self {
            auth: self.auth.clone(),
            registry: self.registry.clone(),
        }
    }
}

/// The secure listener's routes: `/metrics` behind [`MetricsAuth`], and nothing else (the health
/// routes stay on the probe address, plain, for the kubelet).
pub fn router<R: Reviews>(auth: Arc<MetricsAuth<R>>, registry: Arc<Registry>) -> Router {
    Router::new()
        .route(METRICS_PATH, get(secure_metrics::<R>))
        .with_state(SecureState { auth, registry })
}

async fn secure_metrics<R: Reviews>(
    State(state): State<SecureState<R>>,
    headers: HeaderMap,
) -> Response {
    match state.auth.check(&headers).await {
        Ok(Verdict::Allowed(_)) => metrics_response(&state.registry, &headers),
        Ok(Verdict::Unauthenticated) => {
            debug!("refused /metrics: no bearer token, or one the cell does not know");
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "Unauthorized\n",
            )
                .into_response()
        }
        Ok(Verdict::Forbidden(user)) => {
            debug!(user = %user.name, "refused /metrics: the user may not get it");
            (
                StatusCode::FORBIDDEN,
                format!("Authorization denied for user {:?}\n", user.name),
            )
                .into_response()
        }
        Err(err) => {
            warn!(error = %err, reason = err.metric_label(), "could not decide who may read /metrics; answered 503");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the cell did not review the request's credential\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn headers(authorization: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        h
    }

    #[test]
    fn the_token_is_read_as_the_api_server_reads_it() {
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("BEARER abc extra")), Some("abc"));
        assert_eq!(bearer_token(&headers("  Bearer abc  ")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&headers("Bearer  abc")), None, "two spaces");
        assert_eq!(bearer_token(&headers("Basic YTpi")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn a_token_key_shows_no_token() {
        let key = TokenKey::of("s3cret-token");
        let shown = format!("{key:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert_ne!(key, TokenKey::of("s3cret-token2"));
        assert_eq!(key, TokenKey::of("s3cret-token"));
    }

    fn user(name: &str) -> User {
        User {
            name: name.into(),
            ..User::default()
        }
    }

    #[test]
    fn answers_expire_allowed_later_than_refused() {
        let mut cache = Cache::new(8);
        let t0 = Instant::now();
        let (a, d) = (TokenKey::of("a"), TokenKey::of("d"));
        cache.put(a, Verdict::Allowed(user("a")), t0);
        cache.put(d, Verdict::Forbidden(user("d")), t0);
        let just_before_denied = t0 + DENIED_TTL - Duration::from_millis(1);
        assert!(cache.get(&d, just_before_denied).is_some());
        assert_eq!(cache.get(&d, t0 + DENIED_TTL), None);
        assert!(cache.get(&a, t0 + DENIED_TTL).is_some());
        assert_eq!(cache.get(&a, t0 + ALLOWED_TTL), None);
        assert_eq!(cache.len(), 0, "expired answers are dropped when looked up");
    }

    #[test]
    fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let mut cache = Cache::new(3);
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let key = TokenKey::of;
        cache.put(key("ok-1"), Verdict::Allowed(user("p")), t0);
        cache.put(key("ok-2"), Verdict::Allowed(user("p")), t1);
        cache.put(key("bad-1"), Verdict::Unauthenticated, t1);
        // Full: the refusal expires first and goes, though it came last.
        cache.put(key("bad-2"), Verdict::Unauthenticated, t1);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&key("bad-1"), t1), None);
        for kept in ["ok-1", "ok-2", "bad-2"] {
            assert!(cache.get(&key(kept), t1).is_some(), "{kept}");
        }
        // Once bad-2 has expired, it is what makes room.
        let later = t1 + DENIED_TTL;
        cache.put(key("ok-3"), Verdict::Allowed(user("p")), later);
        assert_eq!(cache.len(), 3);
        for kept in ["ok-1", "ok-2", "ok-3"] {
            assert!(cache.get(&key(kept), later).is_some(), "{kept}");
        }
        // Nothing expired: the answer closest to expiring goes.
        cache.put(key("bad-3"), Verdict::Unauthenticated, later);
        assert_eq!(cache.get(&key("ok-1"), later), None);
        for kept in ["ok-2", "ok-3", "bad-3"] {
            assert!(cache.get(&key(kept), later).is_some(), "{kept}");
        }
        // Replacing a kept answer evicts nothing.
        cache.put(key("ok-3"), Verdict::Unauthenticated, later);
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.get(&key("ok-3"), later),
            Some(Verdict::Unauthenticated)
        );
    }

    /// The cell, as far as reviews go: tokens and who they are, users and whether they may.
    #[derive(Default)]
    struct Cell {
        users: HashMap<String, User>,
        readers: Vec<String>,
        token_reviews: AtomicUsize,
        access_reviews: AtomicUsize,
        asked: Mutex<Vec<(User, String, String)>>,
        down: std::sync::atomic::AtomicBool,
    }

    impl Reviews for Arc<Cell> {
        async fn review_token(&self, token: &str) -> Result<Option<User>, ReviewError> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(ReviewError::TimedOut {
                    review: "TokenReview",
                    timeout: REVIEW_TIMEOUT,
                });
            }
            Ok(self.users.get(token).cloned())
        }

        async fn may(&self, user: &User, verb: &str, path: &str) -> Result<bool, ReviewError> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            crate::sync::lock(&self.asked).push((user.clone(), verb.into(), path.into()));
            Ok(self.readers.contains(&user.name))
        }
    }

    fn cell() -> Arc<Cell> {
        let scraper = User {
            name: "system:serviceaccount:monitoring:prometheus".into(),
            uid: Some("u-1".into()),
            groups: vec![
                "system:serviceaccounts".into(),
                "system:authenticated".into(),
            ],
            extra: BTreeMap::from([(
                "authentication.kubernetes.io/pod-name".into(),
                vec!["prometheus-0".into()],
            )]),
        };
        Arc::new(Cell {
            users: HashMap::from([
                ("scraper-token".to_string(), scraper.clone()),
                ("stranger-token".to_string(), user("stranger")),
            ]),
            readers: vec![scraper.name],
            ..Cell::default()
        })
    }

    fn bearer(token: &str) -> HeaderMap {
        headers(&format!("Bearer {token}"))
    }

    #[tokio::test(start_paused = true)]
    async fn the_cell_decides_and_its_answers_are_reused_until_they_expire() {
        let cell = cell();
        let auth = MetricsAuth::new(cell.clone(), Metrics::unregistered());
        let reviews = || {
            (
                cell.token_reviews.load(Ordering::SeqCst),
                cell.access_reviews.load(Ordering::SeqCst),
            )
        };

        // No token: refused without asking anyone.
        assert_eq!(
            auth.check(&HeaderMap::new()).await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(reviews(), (0, 0));
        // A token the cell does not know: one TokenReview, no access review.
        assert_eq!(
            auth.check(&bearer("made-up")).await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(reviews(), (1, 0));
        // A user without the permission, and one with it.
        let stranger = auth.check(&bearer("stranger-token")).await.unwrap();
        assert_eq!(stranger.status(), StatusCode::FORBIDDEN);
        let scraper = auth.check(&bearer("scraper-token")).await.unwrap();
        assert_eq!(scraper.status(), StatusCode::OK);
        assert_eq!(reviews(), (3, 2));
        // The access review asked about the user exactly as the token review named them.
        let asked = crate::sync::lock(&cell.asked).last().cloned().unwrap();
        assert_eq!(
            asked,
            (
                cell.users["scraper-token"].clone(),
                "get".into(),
                "/metrics".into()
            )
        );

        // Scrapes every 15 s for a minute: answered from the cache.
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(15)).await;
            assert_eq!(auth.check(&bearer("scraper-token")).await.unwrap(), scraper);
        }
        assert_eq!(reviews(), (3, 2));
        // Past its minute the allowed answer is asked again; the refusals went long before.
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(auth.check(&bearer("scraper-token")).await.unwrap(), scraper);
        assert_eq!(reviews(), (4, 3));
        assert_eq!(
            auth.check(&bearer("stranger-token")).await.unwrap(),
            stranger
        );
        assert_eq!(reviews(), (5, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_the_cell_did_not_answer_is_an_error_and_is_not_kept() {
        let cell = cell();
        let auth = MetricsAuth::new(cell.clone(), Metrics::unregistered());
        cell.down.store(true, Ordering::SeqCst);
        let err = auth.check(&bearer("scraper-token")).await.unwrap_err();
        assert_eq!(err.metric_label(), "timeout");
        assert!(!err.to_string().contains("scraper-token"), "{err}");
        assert_eq!(auth.cached_answers(), 0);
        cell.down.store(false, Ordering::SeqCst);
        assert_eq!(
            auth.check(&bearer("scraper-token")).await.unwrap().status(),
            StatusCode::OK
        );
        assert_eq!(cell.token_reviews.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_token_review_authenticates_only_a_named_user() {
        use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};
        let named = |authenticated: Option<bool>, name: Option<&str>| TokenReviewStatus {
            authenticated,
            user: Some(UserInfo {
                username: name.map(str::to_string),
                groups: Some(vec!["g".into()]),
                uid: Some(String::new()),
                extra: None,
            }),
            ..TokenReviewStatus::default()
        };
        assert_eq!(
            user_of(Some(named(Some(true), Some("alice")))),
            Some(User {
                name: "alice".into(),
                uid: None,
                groups: vec!["g".into()],
                extra: BTreeMap::new(),
            })
        );
        assert_eq!(user_of(Some(named(None, Some("alice")))), None);
        assert_eq!(user_of(Some(named(Some(false), Some("alice")))), None);
        assert_eq!(user_of(Some(named(Some(true), Some("")))), None);
        assert_eq!(user_of(Some(named(Some(true), None))), None);
        assert_eq!(user_of(None), None);
    }

    #[test]
    fn the_access_review_asks_about_the_non_resource_url() {
        let u = User {
            name: "n".into(),
            uid: Some("u".into()),
            groups: vec!["g".into()],
            extra: BTreeMap::from([("k".into(), vec!["v".into()])]),
        };
        let spec = access_review_spec(&u, "get", "/metrics");
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({"user": "n", "uid": "u", "groups": ["g"], "extra": {"k": ["v"]},
                               "nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
        );
    }
}
