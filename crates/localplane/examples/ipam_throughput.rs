//! Prints how fast IPAM allocates with many live allocations in one pool:
//!
//! ```text
//! cargo run --release -p localplane --example ipam_throughput [claims]
//! ```
//!
//! First the allocation index alone (100,000 /128s, then first-fit lookups at that size), then
//! claims end to end through a project plane's API (default 20,000), reported per batch so a slowdown
//! as the pool fills would show.

use std::time::Instant;

use egress_api::ipam::{IPClaim, IPClass, IPPool};
use kube::api::{Api, PostParams};
use localplane::ipam::index::{Block, PoolIndex, Row, RowKind, Sync};
use localplane::{Identity, LocalPlane};
use serde_json::json;

fn index_only() {
    const N: u32 = 100_000;
    let mut pool = PoolIndex::new(Block::parse("2001:db8::/64").unwrap(), Sync::AcceptNext);
    let start = Instant::now();
    for i in 0..N {
        let block = pool.find_for_claim("space", 128).unwrap();
        pool.insert_row(
            format!("k{i}"),
            Row {
                block,
                kind: RowKind::Claim,
                digest: "space".into(),
            },
        );
    }
    let fill = start.elapsed();
    let start = Instant::now();
    let lookups = 100_000;
    for _ in 0..lookups {
        std::hint::black_box(pool.find_for_claim("space", 128));
    }
    let find = start.elapsed();
    println!(
        "index: {N} allocations in {fill:?} ({:.0}/s); first-fit at {N} live: {:.2} µs per lookup",
        f64::from(N) / fill.as_secs_f64(),
        find.as_secs_f64() * 1e6 / f64::from(lookups)
    );
}

async fn end_to_end(claims: usize) -> anyhow::Result<()> {
    let lp = LocalPlane::builder()
        .project("platform")
        .project_namespace("default")
        .identity(Identity::admin("admin", "admin-token"))
        .ipam("platform")
        .build()?;
    let c = lp.client("platform", "admin");
    let pool: IPPool = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {"cidr": "2001:db8::/64", "ipFamily": "IPv6", "classNames": ["leaf"]},
    }))?;
    Api::<IPPool>::all(c.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    let class: IPClass = serde_json::from_value(json!({
        "metadata": {"name": "leaf"},
        "spec": {"ipFamily": "IPv6", "defaultPrefixLength": 128},
    }))?;
    Api::<IPClass>::all(c.clone())
        .create(&PostParams::default(), &class)
        .await?;
    let api: Api<IPClaim> = Api::namespaced(c, "default");
    let batch = (claims / 5).max(1);
    let total = Instant::now();
    let mut start = Instant::now();
    for i in 0..claims {
        let claim: IPClaim = serde_json::from_value(json!({
            "metadata": {"name": format!("c{i}"), "namespace": "default"},
            "spec": {"className": "leaf", "ipFamily": "IPv6"},
        }))?;
        api.create(&PostParams::default(), &claim).await?;
        if (i + 1) % batch == 0 {
            println!(
                "claims {:>7}..{:>7}: {:.0} claims/s",
                i + 1 - batch,
                i + 1,
                batch as f64 / start.elapsed().as_secs_f64()
            );
            start = Instant::now();
        }
    }
    println!("end to end: {claims} claims in {:?}", total.elapsed());
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let claims = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    index_only();
    end_to_end(claims).await
}
