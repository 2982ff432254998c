//! Clients from kubeconfig files ([`kubeconfig`]) that follow their file, bound their answers and
//! report every request ([`connection`]): the controller's I/O to reach the cell and IPAM, kept
//! out of `config`, which stays the pure flags and settings. [`cell`] bounds a request to the cell
//! in time and reads a shard by name; [`follow`] tells when a followed file changed.

pub mod cell;
pub mod connection;
pub mod follow;
pub mod kubeconfig;

/// Why a client could not be built. Nothing was contacted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kubeconfig file could not be read or understood.
    #[error("read the kubeconfig {path:?}: {message}")]
    Kubeconfig { path: String, message: String },
    /// The cell's client could not be built from the environment.
    #[error("reach the cell's API server: {0}")]
    CellConfig(String),
    /// A setting the connection needs is wrong (an IPAM server URL that takes no project path).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// A short, stable label for metrics and logs.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kubeconfig { .. } => "kubeconfig",
            Error::CellConfig(_) => "cell_config",
            Error::Invalid(_) => "config",
        }
    }
}
