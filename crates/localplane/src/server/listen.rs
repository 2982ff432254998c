//! Accepting connections, plain or over TLS with the throwaway CA, one task each; and dropping a
//! request's connection without an answer when an injected fault says so.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};
use tokio_rustls::TlsAcceptor;

/// The connection a request arrived on. [`serve`] puts one on every request it serves; a request
/// that must go unanswered uses it to drop the connection instead of letting a response out.
#[derive(Clone, Default)]
pub(crate) struct Connection(Arc<Notify>);

/// An answer an injected fault withholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Silence {
    /// Reset the connection now.
    Reset,
    /// Answer nothing; the client's own timeout ends it (or localplane stopping, which resets).
    Hang,
}

/// Withholds a request's answer. On a served connection this never returns: the connection is
/// reset under it. In-process (no connection) the client gets a body that fails to read.
pub(crate) async fn silence(
    conn: Option<Connection>,
    how: Silence,
    mut stop: watch::Receiver<bool>,
) -> Response {
    if how == Silence::Hang {
        let _ = stop.wait_for(|s| *s).await;
    }
    match conn {
        Some(c) => {
            // notify_one keeps the wake-up if the connection task is not waiting yet.
            c.0.notify_one();
            std::future::pending().await
        }
        None => {
            let reset = std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset by fault injection",
            );
            let body = futures::stream::once(async move { Err::<bytes::Bytes, _>(reset) });
            Response::new(Body::from_stream(body))
        }
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is set) until `stop` turns true, then waits
/// for the connections to finish what they are doing.
pub(crate) async fn serve(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    // Every connection task holds a sender; the receiver sees None once all have ended.
    let (alive, mut all_ended) = mpsc::channel::<()>(1);
    loop {
        let (tcp, _) = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    continue;
                }
            },
        };
        let (acceptor, router, stop, alive) = (
            acceptor.clone(),
            router.clone(),
            stop.clone(),
            alive.clone(),
        );
        tokio::spawn(async move {
            if let Err(e) = connection(tcp, acceptor, router, stop).await {
                tracing::debug!("connection: {e}");
            }
            drop(alive);
        });
    }
    drop(listener);
    drop(alive);
    let _ = all_ended.recv().await;
}

async fn connection(
    tcp: TcpStream,
    acceptor: Option<TlsAcceptor>,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    // hyper owns the stream; this second handle on the socket is how a reset sets SO_LINGER to
    // zero before the last descriptor closes, so the peer gets an RST rather than a FIN.
    let std = tcp.into_std()?;
    let handle = TcpStream::from_std(std.try_clone()?)?;
    let tcp = TcpStream::from_std(std)?;
    let conn = Connection::default();
    let tagged = conn.clone();
    let svc = tower::ServiceBuilder::new()
        .map_request(move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(tagged.clone());
            req
        })
        .service(router);
    let reset = match acceptor {
        None => drive(tcp, svc, &conn, stop).await,
        Some(a) => {
            let tls = tokio::select! {
                r = a.accept(tcp) => r?,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            drive(tls, svc, &conn, stop).await
        }
    };
    if reset {
        handle.set_zero_linger()?;
    }
    Ok(())
}

/// Serves one connection until it ends; true when a request asked for it to be reset (the
/// connection is dropped by then, unanswered).
async fn drive<I, S>(io: I, svc: S, conn: &Connection, mut stop: watch::Receiver<bool>) -> bool
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<
            http::Request<hyper::body::Incoming>,
            Response = Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let builder = Builder::new(TokioExecutor::new());
    let served =
        builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(svc));
    tokio::pin!(served);
    let mut stopping = false;
    loop {
        tokio::select! {
            biased;
            _ = conn.0.notified() => return true,
            r = served.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!("serving a connection: {e}");
                }
                return false;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}
