//! Accepting connections: plain HTTP through axum, and HTTPS with the throwaway CA.

use std::sync::Arc;

/// Serves `router` over TLS on `listener` until `stop` turns true.
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Arc<rustls::ServerConfig>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, _) = tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper_util::service::TowerToHyperService::new(router);
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(io, svc);
            tokio::pin!(conn);
            let stopping = tokio::select! {
                _ = conn.as_mut() => false,
                _ = async { let _ = stop.wait_for(|s| *s).await; } => true,
            };
            if stopping {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        });
    }
}

/// Serves `router` over plain HTTP on `listener` until `stop` turns true.
pub(crate) async fn serve_plain(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let res = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
    if let Err(e) = res {
        tracing::error!("localplane server: {e}");
    }
}
