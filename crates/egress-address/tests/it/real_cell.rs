//! The controller against the real kube-apiserver 1.37 as its cell, under the shipped install
//! (`config/egress-address`, applied with `kubectl apply --server-side` as an operator would), as
//! the ServiceAccount identity the install names, with IPAM from localplane (Milo itself is not
//! available here). The real authorizer, the real CEL evaluator, real Leases and real
//! events.k8s.io validation judge what localplane only emulates.

use std::time::Duration;

use egress_address::ipam::naming::claim_name;
use egress_api::shard::EgressShard;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use localplane::testing::{judges, shard_object, workspace_root};
use realcell::{Identity, RealCell};
use tokio::sync::OnceCell;

use crate::common::*;

/// Where the shipped install puts the controller, and so its Lease.
const INSTALL_NAMESPACE: &str = "egress-address-system";

/// The shared real cell with the CRD and the shipped install applied, once per test binary.
pub(crate) async fn installed() -> &'static RealCell {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let real = RealCell::shared()
        .await
        .expect("the real control plane starts");
    INSTALLED
        .get_or_init(|| async {
            let config = workspace_root().join("config");
            real.install_crds(&config.join("crd/network.datumapis.com_egressshards.yaml"))
                .await
                .unwrap();
            let out = tokio::process::Command::new(judges::kubectl())
                .arg("--kubeconfig")
                .arg(real.kubeconfig(Identity::Admin))
                .args(["apply", "--server-side", "--field-manager=install", "-k"])
                .arg(config.join("egress-address"))
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "the shipped install does not apply to the real apiserver: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        })
        .await;
    real
}

/// Settings of a controller `identity` watching `namespace`, electing its leader with a Lease
/// in the install's namespace, on short timings.
fn leading_in_install(identity: &str, namespace: &str) -> egress_address::Settings {
    let mut s = settings();
    s.identity = identity.into();
    s.shard_namespace = Some(namespace.into());
    s.leader_election = Some(egress_address::LeaderElection {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(400),
        ..egress_address::LeaderElection::new(INSTALL_NAMESPACE)
    });
    s
}

pub(crate) async fn namespace(admin: &kube::Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {name}: {e}"),
    }
}

pub(crate) async fn cell_id(admin: &kube::Client) -> String {
    Api::<Namespace>::all(admin.clone())
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

pub(crate) async fn addressed_on(shards: &Api<EgressShard>, name: &str) -> EgressShard {
    eventually(
        30,
        &format!("shard {name} addressed on the real cell"),
        || async {
            let s = shards.get(name).await.ok()?;
            (!s.spec.shard_address_ipv6.is_empty()).then_some(s)
        },
    )
    .await
}

#[tokio::test]
async fn as_its_service_account_the_controller_addresses_adopts_and_releases_on_a_real_cell() {
    const NS: &str = "real-rbac";
    let real = installed().await;
    let admin = real.client(Identity::Admin).await.unwrap();
    namespace(&admin, NS).await;
    let cell = cell_id(&admin).await;
    let plane = Plane::start().await;

    // A retained allocation under the claim name of the incarnation of "adopted" (its earlier
    // claim released under Retain), as IPAM keeps it.
    let shards: Api<EgressShard> = Api::namespaced(admin.clone(), NS);
    let adopted: EgressShard = serde_json::from_value(shard_object(NS, "adopted")).unwrap();
    let adopted = shards
        .create(&PostParams::default(), &adopted)
        .await
        .unwrap();
    let adopted_uid = adopted.metadata.uid.clone().unwrap();
    let earlier =
        egress_address::ipam::spec::desired_claim(&egress_address::ipam::spec::ClaimRequest {
            class_name: CLASS,
            claim_namespace: CLAIM_NS,
            location: LOCATION,
            cell: &cell,
            shard_namespace: NS,
            shard_name: "adopted",
            shard_uid: &adopted_uid,
        });
    plane.retain_address(&earlier).await;

    let mut s = leading_in_install("real-cell-0", NS);
    s.drift_check_interval = Duration::from_millis(500);
    let ctl = start_counted(
        s,
        &real.kubeconfig(Identity::Controller),
        plane.ipam_for_controller().await,
    )
    .await;

    let mut uids = std::collections::BTreeMap::new();
    for name in ["fresh", "handed"] {
        let shard: EgressShard = serde_json::from_value(shard_object(NS, name)).unwrap();
        let made = shards.create(&PostParams::default(), &shard).await.unwrap();
        uids.insert(name, made.metadata.uid.unwrap());
    }
    let fresh = addressed_on(&shards, "fresh").await;
    let r = fresh.spec.shard_address_ipv6_claim_ref.clone().unwrap();
    assert_eq!(
        (r.kind.as_str(), r.name.clone()),
        ("IPClaim", claim_name(&cell, NS, "fresh", &uids["fresh"]))
    );
    let adopted = addressed_on(&shards, "adopted").await;
    assert_eq!(
        adopted.spec.shard_address_ipv6_claim_ref.unwrap().kind,
        "IPAllocation"
    );
    // managedFields as the real server keeps them: the controller's one update is its own.
    let managers: Vec<String> = fresh
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.len() >= 2,
        "the creator and the controller: {managers:?}"
    );

    // Leads with a real Lease in the install's namespace.
    let lease = Api::<Lease>::namespaced(admin.clone(), INSTALL_NAMESPACE)
        .get("egress-address-controller.cloud.datumapis.com")
        .await
        .unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("real-cell-0")
    );

    // Events through events.k8s.io, accepted by the real validation.
    let events = eventually(30, "an AddressAssigned event on the real cell", || async {
        let list = Api::<Event>::namespaced(admin.clone(), NS)
            .list(&ListParams::default())
            .await
            .ok()?;
        let reasons: Vec<String> = list.items.into_iter().filter_map(|e| e.reason).collect();
        reasons
            .iter()
            .any(|r| r == "AddressAssigned")
            .then_some(reasons)
    })
    .await;
    assert!(!events.is_empty());

    // Released once the real server says the shard is gone.
    shards
        .delete("fresh", &DeleteParams::default())
        .await
        .unwrap();
    let claim = claim_name(&cell, NS, "fresh", &uids["fresh"]);
    eventually(30, "the claim of the deleted shard released", || async {
        plane.claim_now(&claim).is_none().then_some(())
    })
    .await;
    // Drift checks read the adopted shard's allocation.
    eventually(30, "a drift check", || async {
        (plane.requests(|k| k.verb == "get" && k.resource.starts_with("ipallocations")) >= 1)
            .then_some(())
    })
    .await;
    // Nothing the controller asked the real cell for was refused.
    assert!(ctl.sum("rest_client_requests_total", ("code", "200")) > 0);
    assert_eq!(
        ctl.sum("rest_client_requests_total", ("code", "403")),
        0,
        "the shipped RBAC refused a request"
    );

    // A release it cannot make is handed on in the real Lease, and a successor started after
    // the delete makes it.
    addressed_on(&shards, "handed").await;
    plane.set_faults(vec![fault(PLATFORM, "get", "ipclaims", 503)]);
    shards
        .delete("handed", &DeleteParams::default())
        .await
        .unwrap();
    let leases = Api::<Lease>::namespaced(admin.clone(), INSTALL_NAMESPACE);
    eventually(30, "the real Lease to hand the release on", || async {
        let lease = leases.get(LEASE).await.ok()?;
        let pending = lease
            .metadata
            .annotations?
            .remove(egress_address::runtime::leader::ANNOTATION_RELEASES_PENDING)?;
        pending.contains("\"handed\"").then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
    plane.clear_faults();
    let claim = claim_name(&cell, NS, "handed", &uids["handed"]);
    assert!(plane.claim_now(&claim).is_some(), "nothing released it yet");
    let successor = start_counted(
        leading_in_install("real-cell-1", NS),
        &real.kubeconfig(Identity::Controller),
        plane.ipam_for_controller().await,
    )
    .await;
    eventually(
        30,
        "the successor to release the handed-on claim",
        || async { plane.claim_now(&claim).is_none().then_some(()) },
    )
    .await;
    assert_eq!(
        successor.sum("rest_client_requests_total", ("code", "403")),
        0,
        "the shipped RBAC refused a request"
    );
    successor.stop().await.unwrap();
}

/// Rows `kubectl auth can-i --list` shows for every authenticated identity (the bootstrap roles
/// system:basic-user, system:discovery, system:public-info-viewer): not the install's.
fn granted_to_everyone(resource: &str) -> bool {
    resource.is_empty()
        || resource.starts_with("selfsubject")
        || resource.starts_with("clustertrustbundles.")
}

/// `kubectl auth can-i --list` as the controller, in `namespace`: (resource, names, verbs) of
/// the install's own rows.
async fn can_i(real: &RealCell, namespace: &str) -> Vec<(String, String, String)> {
    let out = tokio::process::Command::new(judges::kubectl())
        .arg("--kubeconfig")
        .arg(real.kubeconfig(Identity::Controller))
        .args(["auth", "can-i", "--list", "-n", namespace])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut rows: Vec<(String, String, String)> = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| {
            let cols: Vec<&str> = l
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect();
            let [resource, _urls, names, verbs] = cols.as_slice() else {
                return None;
            };
            let strip = |v: &str| v.trim_matches(|c| c == '[' || c == ']').to_string();
            Some((resource.to_string(), strip(names), strip(verbs)))
        })
        .filter(|(r, _, _)| !granted_to_everyone(r))
        .collect();
    rows.sort();
    rows
}

/// The table of docs/operations.md, "What the controller may do in the cell", as rows valid in
/// `namespace`.
fn documented(namespace: &str) -> Vec<(String, String, String)> {
    let doc = std::fs::read_to_string(workspace_root().join("docs/operations.md")).unwrap();
    let section = doc
        .split("### What the controller may do in the cell")
        .nth(1)
        .expect("the section in docs/operations.md");
    let mut rows: Vec<(String, String, String)> = section
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cols: Vec<String> = l
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect();
            let (resource, names, verbs, place) = (&cols[1], &cols[2], &cols[3], &cols[4]);
            let here = !place.contains("only") || place.contains(namespace);
            here.then(|| (resource.clone(), names.clone(), verbs.clone()))
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test]
async fn what_the_controller_may_do_is_what_the_runbook_says() {
    let real = installed().await;
    for namespace in [INSTALL_NAMESPACE, "default"] {
        let documented = documented(namespace);
        assert!(documented.len() >= 3, "{documented:?}");
        assert_eq!(
            can_i(real, namespace).await,
            documented,
            "kubectl auth can-i --list in {namespace} against docs/operations.md"
        );
    }
}

/// The controller's one write, a merge patch carrying the resourceVersion it read, sent with the
/// controller's own identity: the real apiserver refuses it with 409 once the shard moved on,
/// and its CEL rules refuse a second address.
#[tokio::test]
async fn the_patch_is_conditional_on_a_real_cell() {
    const NS: &str = "real-patch";
    let real = installed().await;
    let admin = real.client(Identity::Admin).await.unwrap();
    namespace(&admin, NS).await;
    let controller = real.client(Identity::Controller).await.unwrap();
    the_patch_is_conditional(
        &Api::namespaced(admin, NS),
        &Api::namespaced(controller, NS),
        "conditional",
    )
    .await;
}

#[tokio::test]
async fn a_restart_over_ten_thousand_real_shards_writes_nothing() {
    use futures::StreamExt;
    const NS: &str = "real-restart";
    const SHARDS: usize = 10_000;
    let real = installed().await;
    let admin = real.client(Identity::Admin).await.unwrap();
    namespace(&admin, NS).await;
    // Addressed and labelled already, as a cell looks to a controller that restarts: each shard
    // carries the managedFields of the manager that wrote it.
    let shards: Api<EgressShard> = Api::namespaced(admin.clone(), NS);
    let made = futures::stream::iter(0..SHARDS)
        .map(|i| {
            let shards = shards.clone();
            async move {
                let mut shard = shard_object(NS, &format!("s-{i:05}"));
                shard["metadata"]["labels"] =
                    serde_json::json!({egress_api::shard::LABEL_EGRESS_IPV6: egress_api::shard::LABEL_VALUE_FAMILY_SERVED});
                shard["spec"]["shardAddressIPv6"] =
                    serde_json::json!(format!("2001:db8:1::{:x}", i + 1));
                let shard: EgressShard = serde_json::from_value(shard).unwrap();
                let params = PostParams {
                    field_manager: Some("datapath".into()),
                    ..Default::default()
                };
                shards.create(&params, &shard).await.map(drop)
            }
        })
        .buffer_unordered(16)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    assert_eq!(made, SHARDS);

    let plane = Plane::start().await;
    let mut s = settings();
    s.shard_namespace = Some(NS.into());
    s.leader_election = None;
    s.drift_check_interval = Duration::ZERO;
    let started = std::time::Instant::now();
    let ctl = start_counted(
        s,
        &real.kubeconfig(Identity::Controller),
        plane.ipam_for_controller().await,
    )
    .await;
    idle(&ctl).await;
    let took = started.elapsed();
    assert_eq!(ctl.handle.remembered_shards(), SHARDS);
    assert_eq!(
        ctl.sum("rest_client_requests_total", ("method", "PUT")),
        0,
        "a restart over addressed shards wrote"
    );
    assert_eq!(plane.work_request_total(), 0, "nor asked IPAM anything");
    eprintln!(
        "restart over {SHARDS} real shards: ready and idle in {} ms",
        took.as_millis()
    );
    ctl.stop().await.unwrap();
}

/// Each rule of the install's cell RBAC taken away in turn, on a real cell of its own (RBAC is
/// cluster-wide): the real authorizer refuses the controller, `/ready` names what the cell
/// forbids in the apiserver's own words (the verb and the resource), and nothing is written that
/// needed the rule. Events are the one rule whose loss costs no address: the shard is addressed,
/// its events are not published (a warning in the log says which).
#[tokio::test]
async fn without_any_one_rule_the_controller_names_what_it_may_not_do_and_writes_nothing() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
    const NS: &str = "real-less";
    let real = RealCell::start()
        .await
        .expect("a real control plane of its own");
    let admin = real.client(Identity::Admin).await.unwrap();
    let config = workspace_root().join("config");
    real.install_crds(&config.join("crd/network.datumapis.com_egressshards.yaml"))
        .await
        .unwrap();
    let out = tokio::process::Command::new(judges::kubectl())
        .arg("--kubeconfig")
        .arg(real.kubeconfig(Identity::Admin))
        .args(["apply", "--server-side", "-k"])
        .arg(config.join("egress-address"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    namespace(&admin, NS).await;
    let cluster_roles: Api<ClusterRole> = Api::all(admin.clone());
    let roles: Api<Role> = Api::namespaced(admin.clone(), INSTALL_NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), INSTALL_NAMESPACE);
    let full_cluster = cluster_roles
        .get("egress-address-controller")
        .await
        .unwrap();
    let full_role = roles.get("egress-address-leader-election").await.unwrap();
    // (which role, rule index, what /ready must name, whether a shard can still be addressed)
    let cases: [(&str, usize, &str, bool); 4] = [
        (
            "ClusterRole",
            0,
            r#"cannot list resource "egressshards""#,
            false,
        ),
        ("ClusterRole", 1, "", true),
        (
            "ClusterRole",
            2,
            r#"cannot get resource "namespaces""#,
            false,
        ),
        ("Role", 0, r#"resource "leases""#, false),
    ];
    assert_eq!(
        full_cluster.rules.as_ref().map(Vec::len).unwrap_or(0)
            + full_role.rules.as_ref().map(Vec::len).unwrap_or(0),
        cases.len(),
        "a case for every rule of the install"
    );

    let plane = Plane::start().await;
    let shards: Api<EgressShard> = Api::namespaced(admin.clone(), NS);
    for (i, (kind, r, named, addresses)) in cases.into_iter().enumerate() {
        let mut cluster = full_cluster.clone();
        let mut role = full_role.clone();
        let rules = if kind == "ClusterRole" {
            &mut cluster.rules
        } else {
            &mut role.rules
        };
        let removed = rules.as_mut().unwrap().remove(r);
        for (api_replace, what) in [
            (
                cluster_roles
                    .replace("egress-address-controller", &PostParams::default(), &{
                        let mut c = cluster.clone();
                        c.metadata.resource_version = None;
                        c
                    })
                    .await
                    .map(drop),
                "ClusterRole",
            ),
            (
                roles
                    .replace("egress-address-leader-election", &PostParams::default(), &{
                        let mut c = role.clone();
                        c.metadata.resource_version = None;
                        c
                    })
                    .await
                    .map(drop),
                "Role",
            ),
        ] {
            api_replace.unwrap_or_else(|e| panic!("replacing the {what}: {e}"));
        }
        // A lease left by the run before would let a controller without `create` lead.
        let _ = leases
            .delete(
                "egress-address-controller.cloud.datumapis.com",
                &DeleteParams::default(),
            )
            .await;

        let name = format!("less-{i}");
        let s = leading_in_install(&name, NS);
        let ctl = start_counted_unready(
            s,
            &real.kubeconfig(Identity::Controller),
            plane.ipam_for_controller().await,
        )
        .await;
        let shard: EgressShard = serde_json::from_value(shard_object(NS, &name)).unwrap();
        shards.create(&PostParams::default(), &shard).await.unwrap();
        let what = format!(
            "without {kind} rule {r} ({:?} on {:?})",
            removed.verbs, removed.resources
        );
        eventually(30, &format!("{what}: the controller refused"), || async {
            (ctl.sum("rest_client_requests_total", ("code", "403")) > 0).then_some(())
        })
        .await;
        if !named.is_empty() {
            let reasons = eventually(30, &format!("{what}: /ready naming it"), || async {
                let reasons = ctl.handle.not_ready_because();
                reasons
                    .iter()
                    .any(|r| r.starts_with("the cell forbids") && r.contains(named))
                    .then_some(reasons)
            })
            .await;
            assert!(!ctl.handle.is_ready(), "{what}: ready although {reasons:?}");
        }
        if addresses {
            addressed_on(&shards, &name).await;
            let events = Api::<Event>::namespaced(admin.clone(), NS)
                .list(&ListParams::default())
                .await
                .unwrap();
            assert!(events.items.is_empty(), "{what}: an event was published");
        } else {
            assert!(
                shards
                    .get(&name)
                    .await
                    .unwrap()
                    .spec
                    .shard_address_ipv6
                    .is_empty(),
                "{what}: the shard was written"
            );
            let cell = cell_id(&admin).await;
            let uid = shards.get(&name).await.unwrap().metadata.uid.unwrap();
            assert!(
                plane
                    .claim_now(&claim_name(&cell, NS, &name, &uid))
                    .is_none(),
                "{what}: a claim was made in IPAM"
            );
        }
        ctl.stop().await.unwrap();
    }
    real.stop().await.unwrap();
}

/// The bearer token in a kubeconfig the control plane wrote.
fn token_of(kubeconfig: &std::path::Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap_or_else(|| panic!("no token in {}", kubeconfig.display()))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_may_read_the_secure_metrics_is_what_the_real_apiserver_says() {
    use egress_address::admin::auth::{self, MetricsAuth};
    use egress_address::admin::tls::{self, CertSource, ServingCert};
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;

    let real = installed().await;
    let admin = real.client(Identity::Admin).await.unwrap();
    // The secure /metrics as the binary serves it, asking the real cell as the controller's
    // ServiceAccount: the install's ClusterRole egress-address-metrics-auth must let it.
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = egress_address::Metrics::register(&mut registry);
    let reviewer = real.client(Identity::Controller).await.unwrap();
    let metrics_auth = std::sync::Arc::new(MetricsAuth::new(reviewer, metrics));
    let (serving, _) = ServingCert::load(&CertSource::SelfSigned {
        names: vec!["localhost".into()],
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(tls::serve(
        listener,
        auth::router(metrics_auth, std::sync::Arc::new(registry)),
        serving.server_config().unwrap(),
        stop.clone().cancelled_owned(),
    ));
    let tls = crate::metrics_auth::pinned(serving.end_entity());
    let get = |token: Option<String>| {
        let tls = tls.clone();
        async move {
            crate::metrics_auth::https(&tls, port, "/metrics", token.as_deref())
                .await
                .unwrap()
        }
    };
    let token = |who: Identity| Some(token_of(&real.kubeconfig(who)));

    assert_eq!(get(None).await.0, 401);
    assert_eq!(
        get(Some("not-a-token-the-apiserver-issued".into())).await.0,
        401
    );
    // Bound to the bootstrap view role, which grants no non-resource URL; and the controller
    // itself, which holds only the reviews.
    let (code, body) = get(token(Identity::Operator)).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("operator"), "{body}");
    assert_eq!(get(token(Identity::Controller)).await.0, 403);
    // system:masters may do anything.
    let (code, body) = get(token(Identity::Admin)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("egress_address_build_info{"), "{body}");

    // The shipped reader role, bound as the runbook binds it to a scraper, lets the operator in
    // once its refusal has expired from the cache.
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "operator-reads-egress-address-metrics"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "egress-address-metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "operator"}]
    }))
    .unwrap();
    let bindings = Api::<ClusterRoleBinding>::all(admin.clone());
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    eventually(
        30,
        "the operator, now a reader, to get /metrics",
        || async { (get(token(Identity::Operator)).await.0 == 200).then_some(()) },
    )
    .await;
    bindings
        .delete(
            "operator-reads-egress-address-metrics",
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    stop.cancel();
}
