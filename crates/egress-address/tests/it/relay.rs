//! A TCP relay between the controller and its cell that a test can cut: every open connection
//! closed at once, and new ones held (accepted, not forwarded) until the relay is restored. TLS
//! passes through untouched, so the controller still verifies the server it reaches.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, PartialEq, Eq)]
struct State {
    open: bool,
    /// Bumped by every cut: a connection forwarded under an older one is closed.
    cuts: u64,
}

pub struct Relay {
    addr: SocketAddr,
    state: watch::Sender<State>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// A relay on a free loopback port to `upstream`'s host and port (an `https://` or `http://`
    /// URL on loopback).
    pub async fn to(upstream: &str) -> Relay {
        let upstream: SocketAddr = upstream
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the upstream is an IP and port");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, _) = watch::channel(State {
            open: true,
            cuts: 0,
        });
        let states = state.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(client, upstream, states.subscribe()));
            }
        });
        Relay {
            addr,
            state,
            accept,
        }
    }

    /// `scheme://127.0.0.1:PORT` of the relay.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Closes every forwarded connection now and holds new ones until [`Relay::restore`].
    pub fn cut(&self) {
        self.state.send_modify(|s| {
            s.open = false;
            s.cuts += 1;
        });
    }

    pub fn restore(&self) {
        self.state.send_modify(|s| s.open = true);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn forward(mut client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<State>) {
    let Ok(now) = state.wait_for(|s| s.open).await.map(|s| *s) else {
        return;
    };
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = state.wait_for(|s| s.cuts != now.cuts) => {}
    }
}

/// A client of the cell whose kubeconfig is `kubeconfig`, reaching it through `relay`.
pub async fn client_through(relay: &Relay, kubeconfig: &std::path::Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let scheme = config
        .cluster_url
        .scheme_str()
        .unwrap_or("https")
        .to_string();
    config.cluster_url = relay.url(&scheme).parse().unwrap();
    kube::Client::try_from(config).unwrap()
}
