//! Raw request throughput of localplane over loopback HTTP (not a test; prints numbers).
//!
//! `cargo run -p localplane --release --example throughput -- [objects] [concurrency]`
//!
//! Creates `objects` EgressShards, then measures GETs, merge PATCHes (validated, CEL included),
//! status PATCHes and full LISTs, each with `concurrency` clients in flight, while one watcher
//! follows every change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use localplane::LocalPlane;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const TOKEN: &str = localplane::DEFAULT_ADMIN_TOKEN;

async fn call(c: &HttpClient, method: &str, url: &str, ct: &str, body: String) -> u16 {
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", ct)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = c.request(req).await.expect("request");
    let code = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    code
}

async fn phase<F, Fut>(name: &str, n: usize, conc: usize, f: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u16> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = vec![];
    for _ in 0..conc {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut bad = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return bad;
                }
                let code = f(i).await;
                if !(200..300).contains(&code) {
                    bad += 1;
                }
            }
        }));
    }
    let mut bad = 0;
    for t in tasks {
        bad += t.await.unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name:>14}: {n:>7} requests in {secs:>6.2}s = {:>9.0} req/s ({bad} failed)",
        n as f64 / secs
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let objects: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let conc: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let lp = LocalPlane::builder()
        .crd(<egress_api::shard::EgressShard as kube::CustomResourceExt>::crd())
        .namespace("ns1")
        .watch_history(objects * 4 + 100)
        .build()?;
    let running = lp.serve("127.0.0.1:0".parse()?).await?;
    let base = format!(
        "{}/apis/network.datumapis.com/v1alpha1/namespaces/ns1/egressshards",
        running.base_url()
    );
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let watched = Arc::new(AtomicUsize::new(0));
    {
        let (c, base, watched) = (client.clone(), base.clone(), watched.clone());
        tokio::spawn(async move {
            let req = http::Request::builder()
                .uri(format!("{base}?watch=true&resourceVersion=1"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let mut body = c.request(req).await.unwrap().into_body();
            while let Some(Ok(frame)) = body.frame().await {
                if let Some(d) = frame.data_ref() {
                    watched.fetch_add(d.iter().filter(|b| **b == b'\n').count(), Ordering::Relaxed);
                }
            }
        });
    }

    println!("localplane throughput: {objects} objects, {conc} concurrent clients");
    let (c, b) = (client.clone(), base.clone());
    phase("create", objects, conc, move |i| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            let body = format!(
                r#"{{"apiVersion":"network.datumapis.com/v1alpha1","kind":"EgressShard","metadata":{{"name":"s{i}","labels":{{"pool":"p{}"}}}},"spec":{{"targetRef":{{"kind":"Node","name":"node-{i}"}}}}}}"#,
                i % 10
            );
            call(&c, "POST", &b, "application/json", body).await
        }
    })
    .await;
    let (c, b) = (client.clone(), base.clone());
    phase("get", objects, conc, move |i| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            call(
                &c,
                "GET",
                &format!("{b}/s{i}"),
                "application/json",
                String::new(),
            )
            .await
        }
    })
    .await;
    let (c, b) = (client.clone(), base.clone());
    phase("patch (CEL)", objects, conc, move |i| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            let body = format!(
                r#"{{"spec":{{"shardAddressIPv6":"2001:db8::{:x}"}}}}"#,
                i + 1
            );
            call(
                &c,
                "PATCH",
                &format!("{b}/s{i}"),
                "application/merge-patch+json",
                body,
            )
            .await
        }
    })
    .await;
    let (c, b) = (client.clone(), base.clone());
    phase("patch status", objects, conc, move |i| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            let body = format!(r#"{{"status":{{"observedGeneration":{i}}}}}"#);
            call(
                &c,
                "PATCH",
                &format!("{b}/s{i}/status"),
                "application/merge-patch+json",
                body,
            )
            .await
        }
    })
    .await;
    let lists = (objects / 100).max(10);
    let (c, b) = (client.clone(), base.clone());
    phase("list (500/page)", lists, conc.min(8), move |_| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            call(
                &c,
                "GET",
                &format!("{b}?&limit=500"),
                "application/json",
                String::new(),
            )
            .await
        }
    })
    .await;
    let (c, b) = (client.clone(), base.clone());
    phase("list selector", lists, conc.min(8), move |i| {
        let (c, b) = (c.clone(), b.clone());
        async move {
            call(
                &c,
                "GET",
                &format!("{b}?labelSelector=pool%3Dp{}", i % 10),
                "application/json",
                String::new(),
            )
            .await
        }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    println!(
        "watch events delivered to one watcher: {}",
        watched.load(Ordering::Relaxed)
    );
    println!("requests counted: {}", running.metrics().total());
    running.shutdown().await;
    Ok(())
}
