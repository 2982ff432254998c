//! Class references (`IPClass.spec.source`) over real HTTP: a project's class naming a class of
//! another project, claims of it binding from that project's pools, both projects claiming
//! through each other at once.

use std::collections::BTreeSet;
use std::time::Duration;

use egress_api::ipam::{IPClaim, IPPool};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use localplane::Running;
use serde_json::{Value, json};

use crate::common::{PLATFORM, claim, flat, start_ipam};

fn client(lp: &Running, plane: &str) -> Client {
    lp.http_client(plane, "admin").unwrap()
}

fn classes(c: &Client) -> Api<DynamicObject> {
    let mut ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "ipam.miloapis.com",
        "v1alpha1",
        "IPClass",
    ));
    ar.plural = "ipclasses".into();
    Api::all_with(c.clone(), &ar)
}

async fn create_class(c: &Client, doc: Value) -> DynamicObject {
    let obj: DynamicObject = serde_json::from_value(doc).unwrap();
    classes(c)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
}

fn reference(name: &str, project: &str, target: &str) -> Value {
    json!({
        "apiVersion": "ipam.miloapis.com/v1alpha1", "kind": "IPClass",
        "metadata": {"name": name},
        "spec": {"source": {"project": project, "name": target}},
    })
}

fn cidr(c: &IPClaim) -> String {
    c.status
        .as_ref()
        .map(|s| s.allocated_cidr.clone())
        .unwrap_or_default()
}

async fn allocated(c: &Client, pool: &str) -> String {
    let p = Api::<IPPool>::all(c.clone()).get(pool).await.unwrap();
    p.status.unwrap().capacity.unwrap().allocated
}

/// Run apart from the test's thread, which gives up on it after a while: planes that wait for
/// each other block the server's threads and every timer with them.
#[test]
fn projects_claim_through_each_others_classes_at_once() {
    let (done, finished) = std::sync::mpsc::channel();
    let run = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(claims_through_each_others_classes());
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!(
                "claims through each other's classes did not finish: the planes wait for each other"
            )
        }
    }
}

async fn claims_through_each_others_classes() {
    let lp = start_ipam().await;
    let (p, t) = (client(&lp, PLATFORM), client(&lp, "tenant"));
    // Each project backs a class of its own and refers to the other's.
    flat(&p, "10.1.0.0/24", json!({"defaultPrefixLength": 32})).await;
    flat(&t, "10.2.0.0/24", json!({"defaultPrefixLength": 32})).await;
    let stored = create_class(&t, reference("theirs", PLATFORM, "flat")).await;
    assert_eq!(
        stored.data["spec"],
        json!({"source": {"project": PLATFORM, "name": "flat"}}),
        "served, kept, and given no defaults"
    );
    create_class(&p, reference("theirs", "tenant", "flat")).await;

    // Both planes claim through the other, concurrently: each write reaches into the other plane,
    // and neither may wait for the other for ever.
    const N: usize = 40;
    let mut tasks = Vec::new();
    for i in 0..N {
        for (c, class) in [(&p, "flat"), (&p, "theirs"), (&t, "flat"), (&t, "theirs")] {
            let api = Api::<IPClaim>::namespaced(c.clone(), "default");
            let name = format!("{class}-{i}");
            tasks.push(tokio::spawn(async move {
                api.create(
                    &PostParams::default(),
                    &claim(&name, json!({"className": class})),
                )
                .await
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap().unwrap());
    }

    // Every address of each project's pool is handed out once, whichever project claimed it.
    let mut in_platform_pool = BTreeSet::new();
    let mut in_tenant_pool = BTreeSet::new();
    for c in &all {
        let set = if cidr(c).starts_with("10.1.") {
            &mut in_platform_pool
        } else {
            &mut in_tenant_pool
        };
        assert!(set.insert(cidr(c)), "{} handed out twice", cidr(c));
    }
    assert_eq!(
        (in_platform_pool.len(), in_tenant_pool.len()),
        (2 * N, 2 * N)
    );
    assert_eq!(allocated(&p, "flat-pool").await, (2 * N).to_string());
    assert_eq!(allocated(&t, "flat-pool").await, (2 * N).to_string());

    // The tenant's claim of the platform's class: its allocation is the tenant's, its row the
    // platform's, and deleting the claim frees the platform's address.
    let claims = Api::<IPClaim>::namespaced(t.clone(), "default");
    let one = claims.get("theirs-0").await.unwrap();
    assert!(cidr(&one).starts_with("10.1."), "{}", cidr(&one));
    assert_eq!(
        one.status.as_ref().unwrap().pool_ref.as_ref().unwrap().name,
        "flat-pool"
    );
    claims
        .delete("theirs-0", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(allocated(&p, "flat-pool").await, (2 * N - 1).to_string());
    let again = Api::<IPClaim>::namespaced(p.clone(), "default")
        .create(
            &PostParams::default(),
            &claim("again", json!({"className": "flat"})),
        )
        .await
        .unwrap();
    assert_eq!(
        cidr(&again),
        cidr(&one),
        "the freed address is handed out again"
    );
}
