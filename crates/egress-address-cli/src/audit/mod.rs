//! `egress-address audit`: which address went where, read from the cell and from IPAM.
//!
//! It lists the cell's shards and GETs each record a ref names (ipclaims or ipallocations), the
//! only IPAM verb the controller's grant allows, so an operator can run it with the controller's
//! own credential. With `--orphaned-claims` it also lists the controller's claims (a verb the
//! controller's grant does not have) and reports those whose shard is gone.
//!
//! Like `kubectl diff`, it exits 0 when everything is consistent, 1 when it found problems, and 2
//! when it could not run (see [`ExitStatus`]). The verdicts themselves are pure ([`verdict`]).

pub mod verdict;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use egress_api::shard::EgressShard;
use kube::api::{Api, ListParams};

use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
    claim_name, legacy_claim_name,
};
use egress_address::ipam::spec::SCOPE_ROLE_LOCATION;
use egress_api::ipam::IPClaim;

use verdict::{ClaimView, Finding, Holder, Lookup, ShardView, judge, orphaned};

#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Kubeconfig of the cell holding the shards (default: KUBECONFIG / in-cluster).
    #[arg(long, env = "CELL_KUBECONFIG")]
    pub cell_kubeconfig: Option<PathBuf>,
    /// Kubeconfig reaching Milo (its server is Milo's base URL; the project path is added per ref).
    #[arg(long, env = "IPAM_KUBECONFIG")]
    pub ipam_kubeconfig: PathBuf,
    /// Only shards (and, with --orphaned-claims, claims for shards) in this namespace.
    #[arg(short = 'n', long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace (the default; for the habit of `kubectl -A`).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    /// Also list the controller's claims in the platform project and report those whose shard is
    /// gone (verdict orphaned-claim). Needs `list` on ipclaims there: an operator's IPAM
    /// credential, not the controller's grant.
    #[arg(long, requires_all = ["platform_project", "location"])]
    pub orphaned_claims: bool,
    /// The project the controller writes claims in (with --orphaned-claims).
    #[arg(long, env = "PLATFORM_PROJECT")]
    pub platform_project: Option<String>,
    /// The namespace of the claims in that project (with --orphaned-claims).
    #[arg(long, env = "CLAIM_NAMESPACE", default_value = "default")]
    pub claim_namespace: String,
    /// The location this cell serves (with --orphaned-claims): claims scoped to another location
    /// are another cell's.
    #[arg(long, env = "LOCATION")]
    pub location: Option<String>,
    /// This cell's identity as the controller records it on claims (with --orphaned-claims);
    /// unset: the UID of the cell's kube-system namespace, as the controller reads it.
    #[arg(long, env = "CELL_ID")]
    pub cell_id: Option<String>,
}

/// Where the controller of this cell writes its claims, and what it marks them with.
#[derive(Clone, Debug)]
pub struct ClaimScope {
    pub project: String,
    pub namespace: String,
    pub location: String,
    /// The cell identity recorded on the claims.
    pub cell: String,
}

impl AuditArgs {
    async fn claim_scope(&self, cell: &kube::Client) -> Result<Option<ClaimScope>> {
        if !self.orphaned_claims {
            return Ok(None);
        }
        let (Some(project), Some(location)) = (&self.platform_project, &self.location) else {
            return Ok(None);
        };
        let cell_id = egress_address::runtime::cell_identity(
            self.cell_id.as_deref(),
            cell,
            std::time::Duration::from_secs(30),
        )
        .await
        .context("reading the cell's identity (or pass --cell-id)")?;
        Ok(Some(ClaimScope {
            project: project.clone(),
            namespace: self.claim_namespace.clone(),
            location: location.clone(),
            cell: cell_id,
        }))
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// How an audit ended, as its exit code tells a script (the codes of `kubectl diff`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// Every shard (and claim) consistent: 0.
    Consistent = 0,
    /// At least one inconsistent verdict: 1.
    Inconsistent = 1,
    /// The audit could not run (unreadable kubeconfig, unreachable server, bad flags): 2.
    Failed = 2,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Runs the audit and prints it; whether everything was consistent, or why it could not run.
pub async fn main(args: &AuditArgs) -> ExitStatus {
    match run(args).await {
        Ok(true) => ExitStatus::Consistent,
        Ok(false) => ExitStatus::Inconsistent,
        Err(e) => {
            eprintln!("Error: {e:?}");
            ExitStatus::Failed
        }
    }
}

/// Runs the audit and prints it; returns whether everything was consistent.
pub async fn run(args: &AuditArgs) -> Result<bool> {
    let cell = cell_client(args.cell_kubeconfig.as_deref()).await?;
    let scope = args.claim_scope(&cell).await?;
    let findings = audit(
        &cell,
        &args.ipam_kubeconfig,
        args.namespace.as_deref(),
        scope.as_ref(),
    )
    .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Table => print_table(&mut out, &findings)?,
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &findings)?;
            writeln!(out)?;
        }
        Output::Yaml => out.write_all(serde_saphyr::to_string(&findings)?.as_bytes())?,
    }
    Ok(findings.iter().all(|f| !f.verdict.is_inconsistent()))
}

pub async fn cell_client(kubeconfig: Option<&Path>) -> Result<kube::Client> {
    egress_address::connect::kubeconfig::cell_client(kubeconfig)
        .await
        .context("building the cell client")
}

/// Reads the shards and their holders and judges them; with `claims`, also the controller's
/// claims whose shard is gone.
pub async fn audit(
    cell: &kube::Client,
    ipam_kubeconfig: &Path,
    namespace: Option<&str>,
    claims: Option<&ClaimScope>,
) -> Result<Vec<Finding>> {
    let api: Api<EgressShard> = match namespace {
        Some(ns) => Api::namespaced(cell.clone(), ns),
        None => Api::all(cell.clone()),
    };
    let shards = api
        .list(&ListParams::default())
        .await
        .context("listing EgressShards in the cell")?;
    let views: Vec<ShardView> = shards.items.iter().map(view).collect();

    let mut clients: BTreeMap<String, kube::Client> = BTreeMap::new();
    let mut lookups: BTreeMap<Holder, Lookup> = BTreeMap::new();
    for holder in views.iter().filter_map(|v| v.holder.clone()) {
        if lookups.contains_key(&holder) {
            continue;
        }
        if !clients.contains_key(&holder.project) {
            let client = ipam_client(ipam_kubeconfig, &holder.project).await?;
            clients.insert(holder.project.clone(), client);
        }
        let client = &clients[&holder.project];
        let answer = match holder.kind.as_str() {
            "IPAllocation" => {
                egress_address::ipam::get_allocation(client, &holder.namespace, &holder.name)
                    .await
                    .map(|a| a.status.map(|s| s.allocated_cidr).unwrap_or_default())
            }
            _ => egress_address::ipam::get_claim(client, &holder.namespace, &holder.name)
                .await
                .map(|c| c.status.map(|s| s.allocated_cidr).unwrap_or_default()),
        };
        let lookup = match answer {
            Ok(allocated_cidr) => Lookup::Found { allocated_cidr },
            Err(kube::Error::Api(s)) if s.code == 404 => Lookup::Missing,
            Err(e) => Lookup::Failed(e.to_string()),
        };
        lookups.insert(holder, lookup);
    }
    let mut findings = judge(&views, &lookups);
    if let Some(scope) = claims {
        let listed = list_claims(ipam_kubeconfig, scope).await?;
        findings.extend(orphaned(&listed, &views, namespace));
    }
    Ok(findings)
}

/// A client for one project's control plane, from the kubeconfig naming Milo's base URL.
async fn ipam_client(kubeconfig: &Path, project: &str) -> Result<kube::Client> {
    egress_address::ipam::ipam_client(kubeconfig, project)
        .await
        .with_context(|| format!("building the IPAM client from {}", kubeconfig.display()))
}

/// The claims the controller made in `scope`: named as it names them, annotated with their shard,
/// and scoped to this cell's location.
async fn list_claims(ipam_kubeconfig: &Path, scope: &ClaimScope) -> Result<Vec<ClaimView>> {
    let client = ipam_client(ipam_kubeconfig, &scope.project).await?;
    let api: Api<IPClaim> = Api::namespaced(client, &scope.namespace);
    let mut views = vec![];
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.with_context(|| {
            format!(
                "listing IPClaims in project {:?} namespace {:?} (--orphaned-claims needs list on ipclaims)",
                scope.project, scope.namespace
            )
        })?;
        views.extend(page.items.iter().filter_map(|c| claim_view(c, scope)));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(views)
}

/// A claim this cell's controller made: marked with this cell and named for it, or (made before
/// claims were marked) unmarked and named the old way.
fn claim_view(claim: &IPClaim, scope: &ClaimScope) -> Option<ClaimView> {
    let annotations = claim.metadata.annotations.as_ref()?;
    let shard_namespace = annotations.get(ANNOTATION_SHARD_NAMESPACE)?;
    let shard_name = annotations.get(ANNOTATION_SHARD_NAME)?;
    let shard_uid = annotations.get(ANNOTATION_SHARD_UID).cloned();
    let name = claim.metadata.name.clone()?;
    let location = claim
        .spec
        .scope
        .get(SCOPE_ROLE_LOCATION)
        .map(|s| s.name.as_str());
    let ours = match (annotations.get(ANNOTATION_CELL), &shard_uid) {
        (Some(cell), Some(_)) => {
            *cell == scope.cell && name == claim_name(cell, shard_namespace, shard_name)
        }
        (None, None) => name == legacy_claim_name(shard_namespace, shard_name),
        _ => false,
    };
    (ours && location == Some(scope.location.as_str())).then(|| ClaimView {
        project: scope.project.clone(),
        namespace: scope.namespace.clone(),
        name,
        shard_namespace: shard_namespace.clone(),
        shard_name: shard_name.clone(),
        shard_uid: shard_uid.clone(),
        allocated_cidr: claim
            .status
            .as_ref()
            .map(|s| s.allocated_cidr.clone())
            .unwrap_or_default(),
    })
}

fn view(shard: &EgressShard) -> ShardView {
    ShardView {
        namespace: shard.metadata.namespace.clone().unwrap_or_default(),
        name: shard.metadata.name.clone().unwrap_or_default(),
        uid: shard.metadata.uid.clone().unwrap_or_default(),
        address: shard.spec.shard_address_ipv6.clone(),
        holder: shard
            .spec
            .shard_address_ipv6_claim_ref
            .as_ref()
            .map(|r| Holder {
                kind: r.kind.clone(),
                project: r.project.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            }),
        deleting: shard.metadata.deletion_timestamp.is_some(),
    }
}

fn print_table(out: &mut impl Write, findings: &[Finding]) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = findings
        .iter()
        .map(|f| {
            [
                format!("{}/{}", f.namespace, f.name),
                if f.address.is_empty() {
                    "-".into()
                } else {
                    f.address.clone()
                },
                f.holder
                    .as_ref()
                    .map(|h| format!("{}/{}", h.kind, h.name))
                    .unwrap_or_else(|| "-".into()),
                f.verdict.as_str().to_string(),
                f.detail.clone(),
            ]
        })
        .collect();
    crate::table::write(
        out,
        &["SHARD", "ADDRESS", "HOLDER", "VERDICT", "DETAIL"],
        &rows,
    )
}
