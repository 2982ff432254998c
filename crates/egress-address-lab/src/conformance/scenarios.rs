//! Shapes of several requests, played on each server in turn: what the controller's cache
//! depends on most and a single request cannot show. Paging through a list by its `continue`
//! token; resourceVersions ordered write after write; a list followed by a watch from its
//! resourceVersion while objects are created, patched and deleted; the initial events of a
//! streaming list and their bookmark; a watch and a continued list from a compacted history;
//! leader election on a Lease.
//!
//! Each plays to a transcript: every step's answer (compared as a single shape's, made-up values
//! blanked) and facts about those values that blanking hides: how the resourceVersions order,
//! whether pages share one, whether a token was given. The facts are compared as they are.

use serde_json::{Map, Value, json};

use super::Error;
use super::compare::Answer;
use super::shapes::{APPLY, JSON, MERGE, SYSTEM_NAMESPACE, Who, shard_in};
use super::side::{Request, Side};

/// One shape of several requests.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub id: &'static str,
    /// Who makes it: `controller`, `python`, ...
    pub from: &'static str,
    /// Who sends the request the scenario is about (writes around it are the admin's).
    pub who: Who,
    /// The requests, as the table shows them.
    pub summary: &'static str,
    play: Play,
}

#[derive(Debug, Clone, Copy)]
enum Play {
    Pages,
    ContinueCompacted,
    WriteOrder,
    LiveWatch,
    InitialEvents,
    WatchTooOld,
    WatchCompacted,
    Lease,
}

/// Every scenario, in the order they run.
pub fn catalogue() -> Vec<Scenario> {
    let s = |id, from, who, summary, play| Scenario {
        id,
        from,
        who,
        summary,
        play,
    };
    vec![
        s(
            "seq-shards-pages",
            "controller",
            Who::Controller,
            "GET shards?limit=2, then ?continue= twice, a create between pages",
            Play::Pages,
        ),
        s(
            "seq-configmaps-continue-compacted",
            "python",
            Who::Admin,
            "GET configmaps?limit=1, compact, GET ?continue=",
            Play::ContinueCompacted,
        ),
        s(
            "seq-shard-write-order",
            "controller",
            Who::Controller,
            "POST, PATCH, PATCH, GET, GET list, DELETE, GET one shard",
            Play::WriteOrder,
        ),
        s(
            "seq-shards-live-watch",
            "controller",
            Who::Controller,
            "GET shards, GET ?watch&resourceVersion=<list's>&allowWatchBookmarks, then \
             POST, PATCH, DELETE, PATCH",
            Play::LiveWatch,
        ),
        s(
            "seq-shards-initial-events",
            "controller",
            Who::Controller,
            "GET ?watch&sendInitialEvents&allowWatchBookmarks, then POST",
            Play::InitialEvents,
        ),
        s(
            "seq-shards-watch-too-old",
            "controller",
            Who::Controller,
            "compact, GET shards?watch&resourceVersion=<older than the history>",
            Play::WatchTooOld,
        ),
        s(
            "seq-configmaps-watch-compacted",
            "python",
            Who::Admin,
            "POST, PATCH, compact, GET configmaps?watch&resourceVersion=<the create's>",
            Play::WatchCompacted,
        ),
        s(
            "seq-lease-election",
            "controller",
            Who::Controller,
            "POST lease, GET, PUT renew, PUT stale, PUT takeover, apply",
            Play::Lease,
        ),
    ]
}

impl Scenario {
    /// Plays the scenario on `side`; `ns` is the run's namespace, `name` names what it makes.
    pub async fn play(&self, side: &Side<'_>, ns: &str) -> Result<Answer, Error> {
        let mut t = Transcript {
            side,
            id: self.id,
            steps: Vec::new(),
            facts: Map::new(),
        };
        let name = self.id;
        let own = |suffix: &'static str| own_namespace(side, ns, suffix);
        match self.play {
            Play::Pages => pages(&mut t, &own("pages").await?).await?,
            Play::ContinueCompacted => continue_compacted(&mut t, &own("compacted").await?).await?,
            Play::WriteOrder => write_order(&mut t, ns, name).await?,
            Play::LiveWatch => live_watch(&mut t, &own("live").await?).await?,
            Play::InitialEvents => initial_events(&mut t, &own("initial").await?).await?,
            Play::WatchTooOld => watch_too_old(&mut t, ns).await?,
            Play::WatchCompacted => watch_compacted(&mut t, &own("watch-compacted").await?).await?,
            Play::Lease => lease(&mut t, name).await?,
        }
        Ok(t.answer())
    }
}

/// What one side answered, step by step, and the facts found on the way.
struct Transcript<'s, 'a> {
    side: &'s Side<'a>,
    id: &'static str,
    steps: Vec<Value>,
    facts: Map<String, Value>,
}

impl Transcript<'_, '_> {
    /// Sends a request as `who` and records its answer as step `label`.
    async fn send(&mut self, label: &str, who: Who, request: Request<'_>) -> Result<Answer, Error> {
        let answer = self.side.send(who, self.id, request).await?;
        self.record(label, &answer);
        Ok(answer)
    }

    async fn get(&mut self, label: &str, who: Who, uri: String) -> Result<Answer, Error> {
        self.send(label, who, Request::bare("GET", uri)).await
    }

    /// Creates `object` as the admin, recorded as step `label`.
    async fn create(&mut self, label: &str, object: &Value) -> Result<Answer, Error> {
        let answer = self.side.create(object, self.id).await?;
        self.record(label, &answer);
        Ok(answer)
    }

    fn record(&mut self, label: &str, answer: &Answer) {
        self.steps.push(json!({
            "step": label, "code": answer.code, "warnings": answer.warnings, "body": answer.body,
        }));
    }

    fn fact(&mut self, name: &str, value: impl Into<Value>) {
        self.facts.insert(name.into(), value.into());
    }

    /// The transcript as one answer: the last step's code, every step, the facts.
    fn answer(self) -> Answer {
        let code = self
            .steps
            .last()
            .and_then(|s| s["code"].as_u64())
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0);
        Answer {
            code,
            warnings: vec![],
            body: json!({"steps": self.steps}),
            facts: Value::Object(self.facts),
        }
    }
}

/// A namespace of the scenario's own, so a list sees only what it made.
async fn own_namespace(side: &Side<'_>, run: &str, suffix: &str) -> Result<String, Error> {
    let name = format!("{run}-{suffix}");
    side.prepare(&[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})])
        .await?;
    Ok(name)
}

/// A resourceVersion as a number: both servers count theirs up.
pub fn rv(body: &Value) -> Option<u64> {
    body["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// How resourceVersion `a` orders against `b`: `after`, `same`, `before`, or `none` when either
/// is missing.
pub fn order(a: Option<u64>, b: Option<u64>) -> &'static str {
    match (a, b) {
        (Some(a), Some(b)) if a > b => "after",
        (Some(a), Some(b)) if a == b => "same",
        (Some(_), Some(_)) => "before",
        _ => "none",
    }
}

/// Whether `a` is `not older` than `b` (or `older`, or `none`): what a read may promise where
/// the real server's own writes (its leases, every few seconds) may come in between.
pub fn not_older(a: Option<u64>, b: Option<u64>) -> &'static str {
    match order(a, b) {
        "after" | "same" => "not older",
        "before" => "older",
        other => other,
    }
}

/// `key=value`, the value percent-encoded.
fn param(key: &str, value: &str) -> String {
    let mut out = format!("{key}=");
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn shards(ns: &str) -> String {
    format!("/apis/network.datumapis.com/v1alpha1/namespaces/{ns}/egressshards")
}

fn continue_of(body: &Value) -> Option<String> {
    body["metadata"]["continue"]
        .as_str()
        .filter(|c| !c.is_empty())
        .map(str::to_string)
}

fn names(body: &Value) -> Vec<String> {
    body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Five shards listed two at a time as the controller's paged list does, following `continue`
/// to the last page, with a shard created between the pages: a continued list is one snapshot.
async fn pages(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    let mut last_write = None;
    for i in 0..5 {
        let made = t
            .create(&format!("create s-{i}"), &shard_in(ns, &format!("s-{i}")))
            .await?;
        last_write = rv(&made.body);
    }
    let first = t
        .get("page 1", Who::Controller, format!("{}?limit=2", shards(ns)))
        .await?;
    let between = t.create("create s-9", &shard_in(ns, "s-9")).await?;
    let mut page = first.clone();
    let mut seen = names(&first.body);
    let mut same_rv = true;
    for n in 2..=3 {
        let Some(token) = continue_of(&page.body) else {
            break;
        };
        page = t
            .get(
                &format!("page {n}"),
                Who::Controller,
                format!("{}?limit=2&{}", shards(ns), param("continue", &token)),
            )
            .await?;
        seen.extend(names(&page.body));
        same_rv &= rv(&page.body) == rv(&first.body);
    }
    let first_rv = rv(&first.body);
    t.fact(
        "the first page against the last write before it",
        not_older(first_rv, last_write),
    );
    t.fact(
        "the create between pages against the first page",
        order(rv(&between.body), first_rv),
    );
    t.fact(
        "every page carries the first page's resourceVersion",
        same_rv,
    );
    t.fact("the shards listed, in order", seen);
    t.fact(
        "the last page has a continue token",
        continue_of(&page.body).is_some(),
    );
    Ok(())
}

/// A continued list whose snapshot was compacted away: 410 Expired on both. ConfigMaps, which
/// the real apiserver of the comparison serves from etcd (no watch cache): its cache keeps its
/// own snapshots, which an etcd compaction made behind its back does not reach, as the Python
/// suite does with Secrets.
async fn continue_compacted(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    for i in 0..3 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("c-{i}"), "namespace": ns},
                        "data": {"i": i.to_string()}});
        t.create(&format!("create c-{i}"), &cm).await?;
    }
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let first = t
        .get("page 1", Who::Admin, format!("{path}?limit=1"))
        .await?;
    let token = continue_of(&first.body).unwrap_or_default();
    t.fact("the first page has a continue token", !token.is_empty());
    // A change after the first page, so the compaction passes its snapshot.
    let later = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "c-9", "namespace": ns}});
    t.create("create c-9", &later).await?;
    t.side.compact().await?;
    let after = t
        .get(
            "page 2 after compaction",
            Who::Admin,
            format!("{path}?limit=1&{}", param("continue", &token)),
        )
        .await?;
    t.fact(
        "the refusal offers a token to go on with",
        continue_of(&after.body).is_some(),
    );
    Ok(())
}

/// One shard written, read, listed and deleted: each write's resourceVersion orders after the
/// one before, a read shows the last, a list is not older than it.
async fn write_order(t: &mut Transcript<'_, '_>, ns: &str, name: &str) -> Result<(), Error> {
    let one = format!("{}/{name}", shards(ns));
    let created = t.create("create", &shard_in(ns, name)).await?;
    let label = |v: &str| json!({"metadata": {"labels": {"step": v}}});
    let mut writes = vec![rv(&created.body)];
    for v in ["1", "2"] {
        let patched = t
            .send(
                &format!("patch {v}"),
                Who::Admin,
                Request::with_body("PATCH", one.clone(), MERGE, &label(v)),
            )
            .await?;
        writes.push(rv(&patched.body));
    }
    let last = *writes.last().unwrap_or(&None);
    let read = t.get("get", Who::Controller, one.clone()).await?;
    let list = t
        .get(
            "list",
            Who::Controller,
            format!(
                "{}?{}",
                shards(ns),
                param("fieldSelector", &format!("metadata.name={name}"))
            ),
        )
        .await?;
    let deleted = t
        .send("delete", Who::Admin, Request::bare("DELETE", one.clone()))
        .await?;
    t.get("get after delete", Who::Controller, one).await?;
    let orders: Vec<&str> = writes.windows(2).map(|w| order(w[1], w[0])).collect();
    t.fact("each write against the one before", orders);
    t.fact(
        "the get against the last write",
        order(rv(&read.body), last),
    );
    t.fact(
        "the list against the last write",
        not_older(rv(&list.body), last),
    );
    t.fact(
        "the delete's answer against the last write",
        order(rv(&deleted.body), last),
    );
    Ok(())
}

/// The controller's restart: a list, then a watch from the list's resourceVersion while shards
/// are created, patched and deleted; the events compared in order, type and object.
async fn live_watch(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    t.create("create a", &shard_in(ns, "a")).await?;
    let list = t.get("list", Who::Controller, shards(ns)).await?;
    let from = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut watch = t
        .side
        .watch(
            Who::Controller,
            t.id,
            format!(
                "{}?watch=true&allowWatchBookmarks=true&{}",
                shards(ns),
                param("resourceVersion", &from)
            ),
        )
        .await?;
    t.fact("the watch's status", watch.code);
    let b = format!("{}/b", shards(ns));
    let label = json!({"metadata": {"labels": {"seen": "yes"}}});
    let mut writes = vec![rv(&t.create("create b", &shard_in(ns, "b")).await?.body)];
    let patch = |uri: String| Request::with_body("PATCH", uri, MERGE, &label);
    writes.push(rv(&t
        .send("patch b", Who::Admin, patch(b.clone()))
        .await?
        .body));
    writes.push(rv(&t
        .send("delete b", Who::Admin, Request::bare("DELETE", b))
        .await?
        .body));
    let a = format!("{}/a", shards(ns));
    writes.push(rv(&t.send("patch a", Who::Admin, patch(a)).await?.body));
    let events = watch
        .until(std::time::Duration::from_secs(15), |seen| {
            seen.iter().filter(|e| e["type"] != "BOOKMARK").count() >= writes.len()
        })
        .await;
    let (bookmarks, changes): (Vec<Value>, Vec<Value>) =
        events.into_iter().partition(|e| e["type"] == "BOOKMARK");
    let against: Vec<&str> = changes
        .iter()
        .zip(&writes)
        .map(|(e, w)| order(rv(&e["object"]), *w))
        .collect();
    t.fact("each event against the write that made it", against);
    t.fact(
        "the first event against the list",
        order(
            changes.first().and_then(|e| rv(&e["object"])),
            from.parse().ok(),
        ),
    );
    // A bookmark may come at any time (about once a minute on the real server): only that it
    // never goes back is compared.
    let mut last = from.parse().ok();
    let mut bookmarks_go_back = false;
    for e in bookmarks.iter() {
        bookmarks_go_back |= order(rv(&e["object"]), last) == "before";
        last = rv(&e["object"]);
    }
    t.fact("a bookmark goes back", bookmarks_go_back);
    t.steps.push(json!({"step": "events", "events": changes}));
    Ok(())
}

/// A streaming list: the shards there as ADDED events, a bookmark marking their end, then what
/// changes after.
async fn initial_events(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    t.create("create a", &shard_in(ns, "a")).await?;
    let made = t.create("create b", &shard_in(ns, "b")).await?;
    let mut watch = t
        .side
        .watch(
            Who::Controller,
            t.id,
            format!(
                "{}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
                 &allowWatchBookmarks=true",
                shards(ns)
            ),
        )
        .await?;
    t.fact("the watch's status", watch.code);
    let end = |e: &Value| {
        e["type"] == "BOOKMARK"
            && e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true"
    };
    let initial = watch
        .until(std::time::Duration::from_secs(15), |seen| {
            seen.iter().any(end)
        })
        .await;
    let bookmark = initial.iter().find(|e| end(e)).map(|e| rv(&e["object"]));
    let c = t.create("create c", &shard_in(ns, "c")).await?;
    let after = watch
        .until(std::time::Duration::from_secs(15), |seen| {
            seen.iter().any(|e| e["type"] == "ADDED")
        })
        .await;
    let after: Vec<Value> = after
        .into_iter()
        .filter(|e| e["type"] != "BOOKMARK")
        .collect();
    t.fact(
        "the end bookmark against the last create before it",
        not_older(bookmark.flatten(), rv(&made.body)),
    );
    t.fact(
        "the next event against the end bookmark",
        order(
            after.first().and_then(|e| rv(&e["object"])),
            bookmark.flatten(),
        ),
    );
    t.fact(
        "the next event against its create",
        order(after.first().and_then(|e| rv(&e["object"])), rv(&c.body)),
    );
    t.steps
        .push(json!({"step": "initial events", "events": initial}));
    t.steps
        .push(json!({"step": "events after", "events": after}));
    Ok(())
}

/// A watch from a resourceVersion the history no longer holds: the one kube-system was made
/// at, from before the run, after a compaction. The real server's watch cache began at the
/// CRD's install; localplane's history ends at its compaction.
async fn watch_too_old(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    let kube_system = t
        .side
        .send(
            Who::Controller,
            t.id,
            Request::bare("GET", "/api/v1/namespaces/kube-system".into()),
        )
        .await?;
    let old = kube_system.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or("1")
        .to_string();
    t.side.compact().await?;
    let uri = format!(
        "{}?watch=true&{}",
        shards(ns),
        param("resourceVersion", &old)
    );
    first_event(t, Who::Controller, uri).await
}

/// Opens a watch expected to end at once, and records its status and first event.
async fn first_event(t: &mut Transcript<'_, '_>, who: Who, uri: String) -> Result<(), Error> {
    let mut watch = t.side.watch(who, t.id, uri).await?;
    t.fact("the watch's status", watch.code);
    let events = watch
        .until(std::time::Duration::from_secs(10), |seen| !seen.is_empty())
        .await;
    t.steps
        .push(json!({"step": "watch", "refusal": watch.refusal, "events": events}));
    Ok(())
}

/// A watch from a resourceVersion etcd compacted away: ConfigMaps, which the real apiserver of
/// the comparison serves from etcd, against localplane's own compaction.
async fn watch_compacted(t: &mut Transcript<'_, '_>, ns: &str) -> Result<(), Error> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": ns}, "data": {"v": "0"}});
    let made = t.create("create", &cm).await?;
    let one = format!("/api/v1/namespaces/{ns}/configmaps/c");
    t.send(
        "patch",
        Who::Admin,
        Request::with_body("PATCH", one, MERGE, &json!({"data": {"v": "1"}})),
    )
    .await?;
    let later = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "d", "namespace": ns}});
    t.create("create d", &later).await?;
    t.side.compact().await?;
    let from = made.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uri = format!(
        "/api/v1/namespaces/{ns}/configmaps?watch=true&{}",
        param("resourceVersion", &from)
    );
    first_event(t, Who::Admin, uri).await
}

/// Leader election as the controller runs it: create, read, renew with the resourceVersion
/// read, a stale renewal refused, a takeover; each with the controller's field manager.
async fn lease(t: &mut Transcript<'_, '_>, name: &str) -> Result<(), Error> {
    let manager = param(
        "fieldManager",
        egress_address::config::settings::CONTROLLER_NAME,
    );
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases");
    let one = format!("{leases}/{name}");
    // Each write a new renewTime, as each renewal is: an update that changes nothing would
    // keep the resourceVersion.
    let lease = |holder: &str, transitions: u32, second: u32, rv: Option<&str>| {
        let renewed = format!("2026-01-01T00:00:{second:02}.000000Z");
        let mut l = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": SYSTEM_NAMESPACE},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "acquireTime": "2026-01-01T00:00:00.000000Z",
                     "renewTime": renewed,
                     "leaseTransitions": transitions},
        });
        if let Some(rv) = rv {
            l["metadata"]["resourceVersion"] = json!(rv);
        }
        l
    };
    let text = |a: &Answer| {
        a.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let created = t
        .send(
            "create",
            Who::Controller,
            Request::with_body(
                "POST",
                format!("{leases}?{manager}"),
                JSON,
                &lease("pod-a", 0, 0, None),
            ),
        )
        .await?;
    let read = t.get("get", Who::Controller, one.clone()).await?;
    let put = |l: Value| Request::with_body("PUT", format!("{one}?{manager}"), JSON, &l);
    let renewed = t
        .send(
            "renew",
            Who::Controller,
            put(lease("pod-a", 0, 10, Some(&text(&read)))),
        )
        .await?;
    let stale = put(lease("pod-b", 1, 20, Some(&text(&read))));
    t.send("stale renewal", Who::Controller, stale).await?;
    let taken = t
        .send(
            "takeover",
            Who::Controller,
            put(lease("pod-b", 1, 30, Some(&text(&renewed)))),
        )
        .await?;
    // Who holds it now, as `kubectl apply --server-side` of the same object by an operator
    // sees it: the controller's fields conflict.
    t.send(
        "apply by another manager",
        Who::Admin,
        Request::with_body(
            "PATCH",
            format!("{one}?fieldManager=operator"),
            APPLY,
            &lease("pod-c", 2, 40, None),
        ),
    )
    .await?;
    t.fact(
        "the read against the create",
        order(rv(&read.body), rv(&created.body)),
    );
    t.fact(
        "the renewal against the read",
        order(rv(&renewed.body), rv(&read.body)),
    );
    t.fact(
        "the takeover against the renewal",
        order(rv(&taken.body), rv(&renewed.body)),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_order_as_numbers() {
        assert_eq!(order(Some(10), Some(9)), "after");
        assert_eq!(order(Some(9), Some(10)), "before");
        assert_eq!(order(Some(7), Some(7)), "same");
        assert_eq!(order(None, Some(7)), "none");
        assert_eq!(
            rv(&json!({"metadata": {"resourceVersion": "12"}})),
            Some(12)
        );
        assert_eq!(rv(&json!({"metadata": {"resourceVersion": "x"}})), None);
    }

    #[test]
    fn a_parameter_is_percent_encoded() {
        assert_eq!(param("continue", "a+b/c=="), "continue=a%2Bb%2Fc%3D%3D");
        assert_eq!(
            param("fieldSelector", "metadata.name=x"),
            "fieldSelector=metadata.name%3Dx"
        );
    }

    #[test]
    fn scenario_ids_are_usable_as_object_names() {
        for s in catalogue() {
            assert!(s.id.len() <= 63 && s.id.starts_with("seq-"), "{}", s.id);
        }
    }
}
