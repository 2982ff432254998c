//! Every write-once step of an EgressShard, judged three ways with the same expected messages:
//! the CEL evaluator localplane uses (no server), localplane over HTTP, and the real
//! kube-apiserver 1.37 serving the CRD of `config/crd`. The real apiserver is the judge: where
//! localplane answers otherwise, localplane is wrong.

use egress_api::crd::egress_shard_crd;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const NAMESPACE: &str = "write-once";

fn shard(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "network.datumapis.com/v1alpha1",
        "kind": "EgressShard",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    })
}

fn target() -> Value {
    json!({"kind": "Node", "name": "node-a"})
}

fn claim_ref() -> Value {
    json!({"apiGroup": "ipam.miloapis.com", "kind": "IPClaim", "project": "datum-platform",
           "namespace": "default", "name": "egress-shard-ipv6.galactic-system.node-a"})
}

/// One update: from `old` (valid when created) to `new`, and the rule messages it must fail
/// with (none: it is allowed).
struct Step {
    what: &'static str,
    old: Value,
    new: Value,
    messages: &'static [&'static str],
}

fn steps() -> Vec<Step> {
    let assigned = json!({"targetRef": target(), "shardAddressIPv6": "2001:db8::1",
                          "shardAddressIPv6ClaimRef": claim_ref()});
    let with = |base: &Value, field: &str, value: Value| {
        let mut v = base.clone();
        v[field] = value;
        v
    };
    let without = |base: &Value, fields: &[&str]| {
        let mut v = base.clone();
        for f in fields {
            v.as_object_mut().unwrap().remove(*f);
        }
        v
    };
    let mut other_ref = claim_ref();
    other_ref["kind"] = json!("IPAllocation");
    let v4 = json!({"targetRef": target(), "shardSID": "fc00::1", "shardAddressIPv4": "198.51.100.1",
                    "nat64Prefix": "64:ff9b::/96", "shardAddressIPv4ClaimRef": claim_ref()});
    let mut v4_ref_renamed = v4.clone();
    v4_ref_renamed["shardAddressIPv4ClaimRef"]["name"] = json!("other");
    vec![
        Step {
            what: "the first assignment",
            old: json!({"targetRef": target()}),
            new: assigned.clone(),
            messages: &[],
        },
        Step {
            what: "a same-value rewrite",
            old: assigned.clone(),
            new: assigned.clone(),
            messages: &[],
        },
        Step {
            what: "a changed address",
            old: assigned.clone(),
            new: with(&assigned, "shardAddressIPv6", json!("2001:db8::2")),
            messages: &["shardAddressIPv6 is immutable once assigned"],
        },
        Step {
            what: "an unassigned address",
            old: assigned.clone(),
            new: without(&assigned, &["shardAddressIPv6"]),
            messages: &["shardAddressIPv6 cannot be unassigned once assigned"],
        },
        Step {
            what: "a changed claim ref",
            old: assigned.clone(),
            new: with(&assigned, "shardAddressIPv6ClaimRef", other_ref),
            messages: &["shardAddressIPv6ClaimRef is immutable once assigned"],
        },
        Step {
            what: "a dropped claim ref",
            old: assigned.clone(),
            new: without(&assigned, &["shardAddressIPv6ClaimRef"]),
            messages: &["shardAddressIPv6ClaimRef cannot be unassigned once assigned"],
        },
        Step {
            what: "a changed SID",
            old: v4.clone(),
            new: with(&v4, "shardSID", json!("fc00::2")),
            messages: &["shardSID is immutable once assigned"],
        },
        Step {
            what: "a removed SID",
            old: v4.clone(),
            new: without(&v4, &["shardSID"]),
            messages: &["shardSID cannot be unassigned once assigned"],
        },
        Step {
            what: "a changed IPv4 address",
            old: v4.clone(),
            new: with(&v4, "shardAddressIPv4", json!("198.51.100.2")),
            messages: &["shardAddressIPv4 is immutable once assigned"],
        },
        Step {
            what: "a changed NAT64 prefix",
            old: v4.clone(),
            new: with(&v4, "nat64Prefix", json!("64:ff9b:1::/96")),
            messages: &["nat64Prefix is immutable once assigned"],
        },
        Step {
            what: "IPv4 address and NAT64 prefix both removed",
            old: v4.clone(),
            new: without(&v4, &["shardAddressIPv4", "nat64Prefix"]),
            messages: &[
                "shardAddressIPv4 cannot be unassigned once assigned",
                "nat64Prefix cannot be unassigned once assigned",
            ],
        },
        Step {
            what: "a renamed IPv4 claim ref",
            old: v4.clone(),
            new: v4_ref_renamed,
            messages: &["shardAddressIPv4ClaimRef is immutable once assigned"],
        },
        Step {
            what: "a removed IPv4 claim ref",
            old: v4.clone(),
            new: without(&v4, &["shardAddressIPv4ClaimRef"]),
            messages: &["shardAddressIPv4ClaimRef cannot be unassigned once assigned"],
        },
    ]
}

fn schema() -> Value {
    let crd = egress_shard_crd();
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn the_evaluator_gives_each_step_its_messages() {
    let schema = schema();
    for step in steps() {
        let (old, new) = (shard("x", step.old), shard("x", step.new));
        let got: Vec<String> =
            match kube::core::cel::Validator::new().validate(&schema, &new, Some(&old)) {
                Ok(()) => vec![],
                Err(errors) => errors.iter().map(|e| e.message.clone()).collect(),
            };
        assert_eq!(got, step.messages, "{}", step.what);
    }
}

/// What a server answered to one step: the status code, and each cause as (field, message).
type Answer = (u16, Vec<(String, String)>);

async fn run_steps(client: kube::Client, prefix: &str) -> Vec<Answer> {
    let gvk = GroupVersionKind::gvk("network.datumapis.com", "v1alpha1", "EgressShard");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, NAMESPACE, &ApiResource::from_gvk(&gvk));
    let mut answers = Vec::new();
    for (i, step) in steps().into_iter().enumerate() {
        let name = format!("{prefix}-{i}");
        let old: DynamicObject = serde_json::from_value(shard(&name, step.old)).unwrap();
        let created = api
            .create(&PostParams::default(), &old)
            .await
            .unwrap_or_else(|e| panic!("{}: creating the old shard: {e}", step.what));
        let mut new: DynamicObject = serde_json::from_value(shard(&name, step.new)).unwrap();
        new.metadata.resource_version = created.metadata.resource_version;
        answers.push(
            match api.replace(&name, &PostParams::default(), &new).await {
                Ok(_) => (200, vec![]),
                Err(kube::Error::Api(s)) => (
                    s.code,
                    s.details
                        .map(|d| d.causes.into_iter().map(|c| (c.field, c.message)).collect())
                        .unwrap_or_default(),
                ),
                Err(e) => panic!("{}: {e}", step.what),
            },
        );
    }
    answers
}

async fn namespace(client: kube::Client) {
    use k8s_openapi::api::core::v1::Namespace;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    match Api::<Namespace>::all(client)
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {NAMESPACE}: {e}"),
    }
}

#[tokio::test]
async fn localplane_and_the_real_apiserver_refuse_each_step_alike() {
    let config = localplane::testing::workspace_root().join("config");
    let real = realcell::RealCell::shared()
        .await
        .expect("the real control plane starts");
    real.install_crds(&config.join("crd/network.datumapis.com_egressshards.yaml"))
        .await
        .unwrap();
    let real_admin = real.client(realcell::Identity::Admin).await.unwrap();
    namespace(real_admin.clone()).await;
    let world = localplane::testing::World::builder(config)
        .start()
        .await
        .expect("localplane starts");
    namespace(world.cell()).await;

    let from_real = run_steps(real_admin, "real").await;
    let from_localplane = run_steps(world.cell(), "local").await;
    for ((step, real), local) in steps().iter().zip(&from_real).zip(&from_localplane) {
        let want = if step.messages.is_empty() { 200 } else { 422 };
        assert_eq!(
            real.0, want,
            "{}: the real apiserver answered {real:?}",
            step.what
        );
        for message in step.messages {
            assert!(
                real.1.iter().any(|(_, m)| m.contains(message)),
                "{}: the real apiserver's causes lack {message:?}: {real:?}",
                step.what
            );
        }
        assert_eq!(
            local, real,
            "{}: localplane answered otherwise than the real apiserver",
            step.what
        );
    }
    world.shutdown().await;
}
