//! The two servers a client suite runs against: localplane, and the real kube-apiserver 1.37 with
//! etcd (`realcell`), the judge of Kubernetes behaviour. A test about Kubernetes behaviour is
//! written once against [`Server`] and run on both by [`on_both!`], asserting what the real
//! server does; what only localplane has (its counters, faults, tallies, projects) is tested in
//! `localplane_only.rs`.

use std::path::PathBuf;

use localplane::{LocalPlaneBuilder, Running};
use realcell::RealCell;

use crate::common::*;

/// The server a test drives: localplane (over TLS, as the real one serves), or a real control
/// plane of its own (namespaces never finish deleting there, so each test gets a fresh one).
pub enum Server {
    Local(Running),
    Real(RealCell),
}

/// Who a client acts as.
#[derive(Clone, Copy, Debug)]
pub enum Who {
    /// Bypasses authorization (`system:masters` on the real server).
    Admin,
    /// A user without any grant: localplane's [`USER`]; on the real server the controller's
    /// ServiceAccount, which holds nothing while the shipped install is not applied.
    User,
}

impl Server {
    /// localplane from `b`, over TLS.
    pub async fn local(b: LocalPlaneBuilder) -> Server {
        Server::Local(serve_tls(b).await)
    }

    /// A real control plane with what [`builder`] gives localplane: this project's CRD and the
    /// fixture CRDs, established, and namespace `ns1`.
    pub async fn real() -> Server {
        Server::real_with(&[]).await
    }

    /// [`Server::real`] with more kube-apiserver flags: `--watch-cache-sizes=RESOURCE#0`, say,
    /// so that watches of that resource come from etcd and see its compaction.
    pub async fn real_with(apiserver_args: &[&str]) -> Server {
        let cell = Server::started(apiserver_args).await;
        let Server::Real(c) = &cell else {
            unreachable!()
        };
        let root = repo_root();
        for crd in [
            root.join("config/crd/network.datumapis.com_egressshards.yaml"),
            fixtures().join("crds/gizmos.yaml"),
            fixtures().join("crds/widgets.yaml"),
        ] {
            c.install_crds(&crd).await.expect("the CRDs install");
        }
        let admin = c.client(realcell::Identity::Admin).await.unwrap();
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "ns1"}})).unwrap();
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(admin)
            .create(&Default::default(), &ns)
            .await
            .expect("ns1 is created");
        cell
    }

    /// A real control plane as it starts: nothing of this project's installed.
    pub async fn real_bare() -> Server {
        Server::started(&[]).await
    }

    async fn started(apiserver_args: &[&str]) -> Server {
        Server::Real(
            RealCell::start_with(apiserver_args)
                .await
                .expect("the real control plane starts"),
        )
    }

    pub fn is_real(&self) -> bool {
        matches!(self, Server::Real(_))
    }

    pub fn kubeconfig(&self, who: Who) -> PathBuf {
        match (self, who) {
            (Server::Local(lp), Who::Admin) => lp.kubeconfig_path("cell", ADMIN).unwrap(),
            (Server::Local(lp), Who::User) => lp.kubeconfig_path("cell", USER).unwrap(),
            (Server::Real(c), Who::Admin) => c.kubeconfig(realcell::Identity::Admin),
            (Server::Real(c), Who::User) => c.kubeconfig(realcell::Identity::Controller),
        }
    }

    /// A kube client of `who`, built from its kubeconfig as any client would build it.
    pub async fn client(&self, who: Who) -> kube::Client {
        kube::Client::try_from(self.config(who).await).expect("a client")
    }

    /// The configuration of `who`'s kubeconfig.
    async fn config(&self, who: Who) -> kube::Config {
        let path = self.kubeconfig(who);
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("a kubeconfig");
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a kubeconfig kube reads")
    }

    /// The name the server authenticates [`Who::User`] as.
    pub fn user_name(&self) -> &'static str {
        match self {
            Server::Local(_) => USER_NAME,
            Server::Real(_) => realcell::Identity::Controller.user(),
        }
    }

    /// The bearer token of `who`, read from its kubeconfig.
    pub fn token(&self, who: Who) -> String {
        let text = std::fs::read_to_string(self.kubeconfig(who)).unwrap();
        let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        doc["users"][0]["user"]["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in {doc}"))
            .to_string()
    }

    /// The groups the server puts [`Who::User`] in, as `kubectl auth whoami` prints them.
    pub fn user_groups(&self) -> &'static str {
        match self {
            Server::Local(_) => "system:authenticated",
            Server::Real(_) => {
                "system:serviceaccounts system:serviceaccounts:egress-address-system system:authenticated"
            }
        }
    }

    /// One HTTP request to `path` (`/api/v1/...`, with its query) as `who`, or with no
    /// credentials at all, for asserting on wire details kube hides: the status code, the
    /// content type and the body (a watch's whole body, once the server ends it).
    pub async fn raw(
        &self,
        who: Option<Who>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String, String) {
        let mut config = self.config(who.unwrap_or(Who::Admin)).await;
        if who.is_none() {
            config.auth_info = Default::default();
        }
        let client = kube::Client::try_from(config).expect("a client");
        let mut req = http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(kube::client::Body::from(body.as_bytes().to_vec()))
            .unwrap();
        crate::common::answer(client.send(req).await.expect("an answer")).await
    }

    /// Forgets the history of changes up to now, so that a watch from an older resourceVersion
    /// is told 410 Expired: localplane's own compaction, or etcd's on the real server (whose
    /// watches see it where they come from etcd, not from its watch cache: see
    /// [`Server::real_with`]). Answers the resourceVersion compacted to: the newest one.
    pub async fn compact_history(&self) -> u64 {
        match self {
            Server::Local(lp) => {
                let cell = lp.cell();
                let newest = cell.resource_version();
                cell.compact_history();
                newest
            }
            Server::Real(c) => c.compact_history().await.expect("etcd compacts"),
        }
    }

    pub async fn shutdown(self) {
        match self {
            Server::Local(lp) => lp.shutdown().await,
            Server::Real(c) => c.stop().await.expect("the real control plane stops"),
        }
    }
}

/// Two tests of one body, `<name>::local` and `<name>::real`: against localplane started from
/// the builder given (the standard [`builder`] by default) and against a real control plane
/// (with the CRDs and `ns1` by default).
macro_rules! on_both {
    ($name:ident) => {
        on_both!($name, Server::local(builder()), Server::real());
    };
    ($name:ident, $local:expr, $real:expr) => {
        mod $name {
            use super::*;

            #[tokio::test]
            async fn local() {
                super::$name($local.await).await
            }

            #[tokio::test]
            async fn real() {
                super::$name($real.await).await
            }
        }
    };
}
pub(crate) use on_both;
