//! The grants in `config/` are exactly enough: the controller, run against localplane with RBAC
//! enforced using only the roles the cell kustomization builds and the Milo grant, addresses,
//! adopts and releases shards and decides who may read its secure `/metrics` without a single
//! 403, and a scraper bound to the shipped reader role reads them; with any one verb removed
//! from any rule, the controller is refused that verb, or the scraper its metrics (so every verb
//! is needed). The same for the opt-in orphan sweep and its grant overlay.

use std::time::{Duration, Instant};

use egress_address::admin::auth::MetricsAuth;
use egress_address::{Controller, LeaderElection, Metrics, Settings};
use egress_address_lab::fleet;
use localplane::Identity;
use localplane::testing::{
    CLAIM_NAMESPACE as CLAIM_NS, PLATFORM_PROJECT as PROJECT, SHARD_NAMESPACE as SHARD_NS,
    allocations_key, claims_key, shard_object, shards_key,
};
use serde_json::{Value, json};

use crate::common::{self, one_fleet_at_a_time};

const CONTROLLER_NS: &str = "egress-address-system";
const SA_USER: &str = "system:serviceaccount:egress-address-system:egress-address-controller";
const MILO_USER: &str = "system:egress-address@cloud.datumapis.com";
/// The service account a Prometheus scrapes with, bound to the shipped reader role as the
/// runbook binds it.
const SCRAPER_USER: &str = "system:serviceaccount:monitoring:prometheus";
const SCRAPER_TOKEN: &str = "scraper-token";
const READER_ROLE: &str = "egress-address-metrics-reader";

struct Grants {
    cell: Vec<Value>,
    milo: Vec<Value>,
}

/// One verb of one rule: (in the Milo grant?, document index, rule index, verb).
type Verb = (bool, usize, usize, String);

impl Grants {
    fn load(kubectl: &std::path::Path) -> Grants {
        let cell = common::kustomize(kubectl, "config/egress-address")
            .into_iter()
            .filter(|d| {
                d["apiVersion"]
                    .as_str()
                    .unwrap()
                    .starts_with("rbac.authorization.k8s.io/")
            })
            .collect();
        Grants {
            cell,
            milo: common::documents("config/egress-address/milo-grant.yaml"),
        }
    }

    /// With the orphan sweep's overlay applied to Milo beside the minimal grant.
    fn with_orphan_sweep(mut self) -> Grants {
        self.milo.extend(common::documents(
            "config/egress-address/milo-grant-orphan-sweep.yaml",
        ));
        self
    }

    fn verbs(&self) -> Vec<Verb> {
        let mut out = vec![];
        for (milo, docs) in [(false, &self.cell), (true, &self.milo)] {
            for (d, doc) in docs.iter().enumerate() {
                for (r, rule) in doc["rules"].as_array().into_iter().flatten().enumerate() {
                    for v in rule["verbs"].as_array().unwrap() {
                        out.push((milo, d, r, v.as_str().unwrap().to_string()));
                    }
                }
            }
        }
        out
    }

    fn clone_grants(&self) -> Grants {
        Grants {
            cell: self.cell.clone(),
            milo: self.milo.clone(),
        }
    }

    fn without(&self, (milo, d, r, verb): &Verb) -> Grants {
        let mut g = Grants {
            cell: self.cell.clone(),
            milo: self.milo.clone(),
        };
        let docs = if *milo { &mut g.milo } else { &mut g.cell };
        let verbs = docs[*d]["rules"][*r]["verbs"].as_array_mut().unwrap();
        verbs.retain(|v| v != verb);
        g
    }

    /// The resource and group of a rule, as localplane's counters name it, or the URL of a
    /// non-resource rule.
    fn resource(&self, (milo, d, r, _): &Verb) -> String {
        let docs = if *milo { &self.milo } else { &self.cell };
        let rule = &docs[*d]["rules"][*r];
        if let Some(url) = rule["nonResourceURLs"][0].as_str() {
            return url.to_string();
        }
        let group = rule["apiGroups"][0].as_str().unwrap();
        let res = rule["resources"][0].as_str().unwrap();
        if group.is_empty() {
            res.to_string()
        } else {
            format!("{res}.{group}")
        }
    }
}

struct Outcome {
    /// With the sweep on: whether the claim of a shard deleted unseen was released.
    orphan_released: Option<bool>,
    addressed: bool,
    adopted: bool,
    released: bool,
    events_patched: bool,
    lease_renewed: bool,
    /// How the scraper's last request for `/metrics` was answered (503: a review the cell
    /// refused the controller).
    scraped: Option<u16>,
    forbidden: Vec<(String, String, String)>,
}

impl Outcome {
    fn complete(&self) -> bool {
        self.addressed
            && self.adopted
            && self.released
            && self.events_patched
            && self.lease_renewed
            && self.scraped == Some(200)
            && self.orphan_released != Some(false)
    }
}

fn ipam_claim(name: &str, shard: &str, reclaim: &str) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClaim",
        "metadata": {"name": name, "namespace": CLAIM_NS, "annotations": {
            "cloud.datumapis.com/egress-shard-namespace": SHARD_NS,
            "cloud.datumapis.com/egress-shard-name": shard}},
        "spec": {"className": "datum-egress-shard-address-ipv6", "ipFamily": "IPv6", "prefixLength": 128,
                 "scope": {"location": {"apiGroup": "networking.datumapis.com", "kind": "Location", "name": "dfw"}},
                 "reclaimPolicy": reclaim}
    })
}

/// Runs the controller with `grants` until the scenario completes or `stop` says so.
/// `stop` looks at the outcome so far (the refusals of one snapshot, the same the outcome
/// reports). With `sweep`, the controller also runs the orphan sweep, and IPAM holds a claim of a
/// shard this cell deleted while no controller ran.
async fn scenario(grants: &Grants, sweep: bool, stop: impl Fn(&Outcome) -> bool) -> Outcome {
    let mut world = fleet::world()
        .namespace(CONTROLLER_NS)
        .identity(Identity::user("cell-sa", "sa-token", SA_USER))
        .identity(Identity::user("milo", "milo-token", MILO_USER))
        .identity(Identity::user("scraper", SCRAPER_TOKEN, SCRAPER_USER))
        .object(
            "cell",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": "prometheus-reads-egress-address-metrics"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
                   "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]}),
        )
        .rbac(true);
    for d in &grants.cell {
        world = world.object("cell", d.clone());
    }
    for d in &grants.milo {
        world = world.object(PROJECT, d.clone());
    }
    let world = world.start().await.unwrap();
    let running = world.lp();
    let platform = running.project(PROJECT).unwrap();
    let cell_id = running.cell_uid();
    let mut uids = std::collections::BTreeMap::new();
    for name in ["s-new", "s-gone", "s-adopt", "s-collide"] {
        let made = running
            .cell()
            .apply_object(shard_object(SHARD_NS, name))
            .unwrap();
        uids.insert(name, made["metadata"]["uid"].as_str().unwrap().to_string());
    }
    let claim_name = |shard: &str| {
        let uid = uids
            .get(shard)
            .map_or("uid-of-a-shard-deleted-unseen", |u| u.as_str());
        egress_address::ipam::naming::claim_name(&cell_id, SHARD_NS, shard, uid)
    };
    // An address an earlier claim of the same name retained: the controller must adopt it.
    let adopt_claim = claim_name("s-adopt");
    let earlier = serde_json::from_value(ipam_claim(&adopt_claim, "s-adopt", "Retain")).unwrap();
    world.retain_address(&earlier).await;
    assert_eq!(
        platform.objects(&allocations_key(), Some(CLAIM_NS)).len(),
        1,
        "retained"
    );
    // A claim under another shard's name: refused on every re-check, so its event repeats (a patch).
    let collide_claim = claim_name("s-collide");
    let mut foreign = ipam_claim(&collide_claim, "someone-else", "Delete");
    foreign["metadata"]["annotations"]["cloud.datumapis.com/egress-shard-namespace"] =
        json!("elsewhere");
    platform.apply_object(foreign).unwrap();
    let orphan = claim_name("s-orphan");
    if sweep {
        let claim =
            egress_address::ipam::spec::desired_claim(&egress_address::ipam::spec::ClaimRequest {
                class_name: "datum-egress-shard-address-ipv6",
                claim_namespace: CLAIM_NS,
                location: "dfw",
                cell: &cell_id,
                shard_namespace: SHARD_NS,
                shard_name: "s-orphan",
                shard_uid: "uid-of-a-shard-deleted-unseen",
            });
        platform
            .apply_object(serde_json::to_value(claim).unwrap())
            .unwrap();
    }
    world.reset_counters();

    let cell_client = world.client("cell", "cell-sa");
    let ipam_kubeconfig = world.kubeconfig(PROJECT, "milo");
    let ipam = egress_address::ipam_client(&ipam_kubeconfig, PROJECT)
        .await
        .unwrap();
    let mut settings = Settings::new("datum-egress-shard-address-ipv6", "dfw", PROJECT);
    settings.claim_namespace = CLAIM_NS.into();
    let mut lease = LeaderElection::new(CONTROLLER_NS);
    lease.retry_period = Duration::from_millis(200);
    settings.leader_election = Some(lease);
    settings.recheck_interval = Duration::from_millis(300);
    settings.event_repeat_interval = Duration::from_millis(100);
    settings.backoff.base = Duration::from_millis(100);
    settings.backoff.cap = Duration::from_secs(1);
    if sweep {
        settings.release_orphaned_claims_every = Duration::from_millis(300);
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::register(&mut registry);
    // The secure /metrics decides with the controller's own cell credential, as the binary does.
    let metrics_auth = MetricsAuth::new(cell_client.clone(), metrics.clone());
    let mut scrape = http::HeaderMap::new();
    scrape.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {SCRAPER_TOKEN}").parse().unwrap(),
    );
    let controller = Controller::new(settings, cell_client, ipam, metrics).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async move {
        let _ = rx.await;
    }));

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut deleted = false;
    let mut addressed = false;
    let mut scraped = None;
    let outcome = loop {
        if scraped != Some(200) {
            scraped = Some(match metrics_auth.check(&scrape).await {
                Ok(verdict) => verdict.status().as_u16(),
                Err(_) => 503,
            });
        }
        let shard_of = |n: &str| running.cell().object(&shards_key(), Some(SHARD_NS), n);
        let address = |n: &str| {
            shard_of(n).map(|s| {
                s["spec"]["shardAddressIPv6"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
        };
        addressed = addressed
            || ["s-new", "s-gone"]
                .iter()
                .all(|n| address(n).is_some_and(|a| !a.is_empty()));
        let adopted = shard_of("s-adopt")
            .is_some_and(|s| s["spec"]["shardAddressIPv6ClaimRef"]["kind"] == "IPAllocation");
        if addressed && !deleted {
            world
                .shards()
                .delete("s-gone", &Default::default())
                .await
                .unwrap();
            deleted = true;
        }
        let gone_claim = claim_name("s-gone");
        let released = deleted
            && running
                .project(PROJECT)
                .unwrap()
                .object(&claims_key(), Some(CLAIM_NS), &gone_claim)
                .is_none();
        let m = running.metrics();
        let events_patched = m.count(|k| {
            k.plane == "cell"
                && k.verb == "patch"
                && k.resource == "events.events.k8s.io"
                && k.code == 200
        }) > 0;
        let lease_renewed = m.count(|k| {
            k.verb == "update" && k.resource == "leases.coordination.k8s.io" && k.code == 200
        }) > 0;
        let forbidden: Vec<(String, String, String)> = m
            .snapshot()
            .into_iter()
            .filter(|c| c.key.code == 403)
            .map(|c| (c.key.plane, c.key.verb, c.key.resource))
            .collect();
        let orphan_released = sweep.then(|| {
            running
                .project(PROJECT)
                .unwrap()
                .object(&claims_key(), Some(CLAIM_NS), &orphan)
                .is_none()
        });
        let o = Outcome {
            orphan_released,
            addressed,
            adopted,
            released,
            events_patched,
            lease_renewed,
            scraped,
            forbidden,
        };
        if Instant::now() > deadline {
            eprintln!("scenario timed out; requests: {:#?}", m.snapshot());
        }
        if o.complete() || stop(&o) || Instant::now() > deadline {
            break o;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    world.shutdown().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grants_are_enough_and_each_verb_is_needed() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let kubectl = common::kubectl();
    let _turn = one_fleet_at_a_time().await;
    let grants = Grants::load(&kubectl);
    assert_eq!(
        grants.cell.len(),
        7,
        "ClusterRole, ClusterRoleBinding, Role, RoleBinding; the reviews' ClusterRole and its binding; the reader role"
    );

    let full = scenario(&grants, false, |_| false).await;
    assert!(
        full.forbidden.is_empty(),
        "the controller needed a verb its grants lack: {:?}",
        full.forbidden
    );
    assert!(full.addressed, "new shards addressed");
    assert!(
        full.adopted,
        "retained allocation adopted (ipallocations get)"
    );
    assert!(
        full.released,
        "a deleted shard's claim released (ipclaims delete)"
    );
    assert!(
        full.events_patched,
        "a repeated event aggregated (events patch)"
    );
    assert!(full.lease_renewed, "the lease renewed (leases update)");
    assert_eq!(
        full.scraped,
        Some(200),
        "the scraper read /metrics (tokenreviews and subjectaccessreviews create; get /metrics)"
    );

    let verbs = grants.verbs();
    assert_eq!(
        verbs.len(),
        4 + 2 + 1 + 3 + 3 + 1 + 1 + 1 + 1,
        "every verb of every rule: {verbs:?}"
    );
    for verb in &verbs {
        let resource = grants.resource(verb);
        let reduced = grants.without(verb);
        // A verb of the controller's is refused to it by the cell; the reader's verb is refused
        // to the scraper by the controller.
        let refused = |o: &Outcome| {
            if resource.starts_with('/') {
                o.scraped == Some(403)
            } else {
                o.forbidden
                    .iter()
                    .any(|(_, v, r)| *v == verb.3 && *r == resource)
            }
        };
        let o = scenario(&reduced, false, refused).await;
        assert!(
            refused(&o),
            "without {} on {resource} nobody was refused it, so the grant does not need it \
             (forbidden: {:?}, scraped: {:?}, complete: {})",
            verb.3,
            o.forbidden,
            o.scraped,
            o.complete()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orphan_sweep_needs_its_overlay_and_nothing_more() {
    let kubectl = common::kubectl();
    let _turn = one_fleet_at_a_time().await;
    let minimal = Grants::load(&kubectl);
    let grants = minimal.clone_grants().with_orphan_sweep();
    let full = scenario(&grants, true, |_| false).await;
    assert!(
        full.forbidden.is_empty(),
        "the sweep needed a verb the minimal grant and its overlay lack: {:?}",
        full.forbidden
    );
    assert_eq!(
        full.orphan_released,
        Some(true),
        "the claim of a shard deleted unseen was released"
    );
    assert!(full.complete(), "everything else works beside the sweep");

    // The overlay's one verb is needed: without it (the minimal grant alone) the sweep is refused
    // its list, and the orphan stays.
    let list_ipclaims = |forbidden: &[(String, String, String)]| {
        forbidden
            .iter()
            .any(|(_, v, r)| v == "list" && r == "ipclaims.ipam.miloapis.com")
    };
    let without = scenario(&minimal, true, |o| list_ipclaims(&o.forbidden)).await;
    assert!(
        list_ipclaims(&without.forbidden),
        "with the minimal grant alone the sweep was never refused its list: {:?}",
        without.forbidden
    );
    assert_eq!(without.orphan_released, Some(false));
    let overlay_verbs: Vec<Verb> = grants
        .verbs()
        .into_iter()
        .filter(|v| !minimal.verbs().contains(v))
        .collect();
    assert_eq!(
        overlay_verbs
            .iter()
            .map(|v| (v.3.as_str(), grants.resource(v)))
            .collect::<Vec<_>>(),
        [("list", "ipclaims.ipam.miloapis.com".to_string())],
        "the overlay grants list on ipclaims and nothing else"
    );
}
