//! `egress-address audit`: which address went where, read from one cell or several cells that
//! claim from one IPAM, and from IPAM.
//!
//! It lists each cell's shards and GETs each record a ref names (ipclaims or ipallocations), the
//! only IPAM verb the controller's grant allows, so an operator can run it with the controller's
//! own credential; the shards of all cells are judged as one fleet ([`verdict`]). With
//! `--orphaned-claims` it also lists the claims in the platform project (a verb the controller's
//! grant does not have) and reports those whose shard is gone, those of cells not given, and
//! those of the Go controller ([`fleet`]). With `--release-orphaned-claims` it releases the
//! orphans it found through the controller's one release path (whose the claim is from its name
//! and annotations, a live read of its shard, then the DELETE by name); a dry run unless `--yes`.
//!
//! Like `kubectl diff`, it exits 0 when everything is consistent, 1 when it found problems, and 2
//! when it could not run (see [`ExitStatus`]).

pub mod fleet;
pub mod verdict;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use egress_address::Metrics;
use egress_address::ipam::Ipam;
use egress_address::ipam::breaker::Breaker;
use egress_address::ipam::release::{
    Decision, Freed, LiveShard, Vouch, judge as judge_release, live_shard, release, whose,
};
use egress_api::ipam::IPClaim;
use egress_api::shard::EgressShard;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use egress_address::ipam::naming::{
    ANNOTATION_CELL, ANNOTATION_SHARD_NAME, ANNOTATION_SHARD_NAMESPACE, ANNOTATION_SHARD_UID,
};

use fleet::{Judged, judge_claims};
use verdict::{ClaimMarks, Finding, Holder, Lookup, Release, ReleaseAction, ShardView, judge};

/// How long one request of the audit may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Kubeconfig of a cell holding shards; give it once per cell to audit several cells that
    /// claim from one IPAM as one fleet (default: KUBECONFIG / in-cluster).
    #[arg(long = "cell-kubeconfig", env = "CELL_KUBECONFIG", value_name = "PATH")]
    pub cell_kubeconfigs: Vec<PathBuf>,
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
    /// Also list the claims in the platform project and report those whose shard is gone
    /// (orphaned-claim), those of cells not given (cell-not-audited) and those of the Go
    /// controller. Needs `list` on ipclaims there: an operator's IPAM credential, not the
    /// controller's grant.
    #[arg(long, requires_all = ["platform_project", "location"])]
    pub orphaned_claims: bool,
    /// Release the orphaned claims found (implies --orphaned-claims): each after a live read
    /// confirms no shard of its UID lives in its cell, with the claim's UID as the delete's
    /// precondition. A dry run unless --yes.
    #[arg(long, requires_all = ["platform_project", "location"])]
    pub release_orphaned_claims: bool,
    /// With --release-orphaned-claims: delete what the dry run would.
    #[arg(long, requires = "release_orphaned_claims")]
    pub yes: bool,
    /// With --release-orphaned-claims: also release orphaned claims of the Go controller, which
    /// name no cell (only safe when every cell of the location is given).
    #[arg(long, requires = "release_orphaned_claims")]
    pub include_legacy_claims: bool,
    /// The project the controller writes claims in (with --orphaned-claims).
    #[arg(long, env = "PLATFORM_PROJECT")]
    pub platform_project: Option<String>,
    /// The namespace of the claims in that project (with --orphaned-claims).
    #[arg(long, env = "CLAIM_NAMESPACE", default_value = "default")]
    pub claim_namespace: String,
    /// The location the cells serve (with --orphaned-claims): claims scoped to another location
    /// are not judged.
    #[arg(long, env = "LOCATION")]
    pub location: Option<String>,
    /// A cell's identity as its controller records it on claims, once per --cell-kubeconfig and
    /// in the same order; unset: the UID of each cell's kube-system namespace, as the controller
    /// reads it.
    #[arg(long = "cell-id", env = "CELL_ID", value_name = "ID")]
    pub cell_ids: Vec<String>,
}

/// Where the claims are, and which of them concern the audit.
#[derive(Clone, Debug)]
pub struct ClaimScope {
    pub project: String,
    pub namespace: String,
    pub location: String,
}

/// What `--release-orphaned-claims` may do.
#[derive(Clone, Copy, Debug)]
pub struct ReleaseMode {
    /// `--yes`: delete; otherwise a dry run.
    pub delete: bool,
    /// `--include-legacy-claims`.
    pub legacy: bool,
}

impl AuditArgs {
    fn claim_scope(&self) -> Option<ClaimScope> {
        if !(self.orphaned_claims || self.release_orphaned_claims) {
            return None;
        }
        let (Some(project), Some(location)) = (&self.platform_project, &self.location) else {
            return None;
        };
        Some(ClaimScope {
            project: project.clone(),
            namespace: self.claim_namespace.clone(),
            location: location.clone(),
        })
    }

    fn release_mode(&self) -> Option<ReleaseMode> {
        self.release_orphaned_claims.then_some(ReleaseMode {
            delete: self.yes,
            legacy: self.include_legacy_claims,
        })
    }

    /// The cells to audit: one per kubeconfig (the default one when none is given), each with
    /// its identity if given.
    fn cell_sources(&self) -> Result<Vec<(Option<PathBuf>, Option<String>)>> {
        let kubeconfigs: Vec<Option<PathBuf>> = if self.cell_kubeconfigs.is_empty() {
            vec![None]
        } else {
            self.cell_kubeconfigs.iter().cloned().map(Some).collect()
        };
        if let Some(empty) = self.cell_ids.iter().position(|id| id.trim().is_empty()) {
            bail!(
                "--cell-id number {} is empty; leave --cell-id out to read each cell's identity",
                empty + 1
            );
        }
        if !self.cell_ids.is_empty() && self.cell_ids.len() != kubeconfigs.len() {
            bail!(
                "--cell-id is given for {} of {} cells: give it once per --cell-kubeconfig, in the same order, or not at all",
                self.cell_ids.len(),
                kubeconfigs.len()
            );
        }
        let mut ids = self.cell_ids.iter().cloned().map(Some);
        Ok(kubeconfigs
            .into_iter()
            .map(|k| (k, ids.next().flatten()))
            .collect())
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
    /// Every shard (and claim) consistent, or an orphan released: 0.
    Consistent = 0,
    /// At least one inconsistent verdict left: 1.
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

/// One audited cell: how it was reached, its client, and its identity.
pub struct AuditedCell {
    /// The kubeconfig it was reached with, for messages.
    pub source: String,
    pub client: kube::Client,
    pub id: String,
}

/// Connects to every cell and reads its identity; two kubeconfigs of one cell are refused.
pub async fn connect(sources: Vec<(Option<PathBuf>, Option<String>)>) -> Result<Vec<AuditedCell>> {
    let mut cells: Vec<AuditedCell> = vec![];
    for (kubeconfig, id) in sources {
        let source = kubeconfig.as_deref().map_or_else(
            || "the default kubeconfig".to_string(),
            |p| p.display().to_string(),
        );
        let client = cell_client(kubeconfig.as_deref()).await?;
        let id = egress_address::runtime::cell_identity(id.as_deref(), &client, REQUEST_TIMEOUT)
            .await
            .with_context(|| {
                format!("reading the identity of the cell of {source} (or pass --cell-id)")
            })?;
        if let Some(twin) = cells.iter().find(|c| c.id == id) {
            bail!(
                "{source} and {} reach one cell (identity {id}): give each cell once",
                twin.source
            );
        }
        cells.push(AuditedCell { source, client, id });
    }
    Ok(cells)
}

/// Runs the audit and prints it; returns whether everything left was consistent.
pub async fn run(args: &AuditArgs) -> Result<bool> {
    let cells = connect(args.cell_sources()?).await?;
    let scope = args.claim_scope();
    let release = args.release_mode();
    let findings = audit(
        &cells,
        &args.ipam_kubeconfig,
        args.namespace.as_deref(),
        scope.as_ref(),
        release,
    )
    .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Table => print_table(&mut out, &findings, cells.len() > 1)?,
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &findings)?;
            writeln!(out)?;
        }
        Output::Yaml => out.write_all(serde_saphyr::to_string(&findings)?.as_bytes())?,
    }
    if let Some(mode) = release {
        eprintln!("{}", release_summary(&findings, mode));
    }
    Ok(findings.iter().all(|f| !f.fails()))
}

pub async fn cell_client(kubeconfig: Option<&Path>) -> Result<kube::Client> {
    egress_address::connect::kubeconfig::cell_client(kubeconfig)
        .await
        .context("building the cell client")
}

/// Reads the shards of every cell and their holders and judges them as one fleet; with `claims`,
/// also the claims listed in that scope; with `release`, releases the orphans among them.
pub async fn audit(
    cells: &[AuditedCell],
    ipam_kubeconfig: &Path,
    namespace: Option<&str>,
    claims: Option<&ClaimScope>,
    release: Option<ReleaseMode>,
) -> Result<Vec<Finding>> {
    let mut views: Vec<ShardView> = vec![];
    for cell in cells {
        let api: Api<EgressShard> = match namespace {
            Some(ns) => Api::namespaced(cell.client.clone(), ns),
            None => Api::all(cell.client.clone()),
        };
        let shards = api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing EgressShards in the cell of {}", cell.source))?;
        views.extend(shards.items.iter().map(|s| view(&cell.id, s)));
    }

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
                    .map(|a| {
                        (
                            a.status.map(|s| s.allocated_cidr).unwrap_or_default(),
                            ClaimMarks::default(),
                        )
                    })
            }
            _ => egress_address::ipam::get_claim(client, &holder.namespace, &holder.name)
                .await
                .map(|c| {
                    let marks = claim_marks(&c);
                    (
                        c.status.map(|s| s.allocated_cidr).unwrap_or_default(),
                        marks,
                    )
                }),
        };
        let lookup = match answer {
            Ok((allocated_cidr, marks)) => Lookup::Found {
                allocated_cidr,
                marks,
            },
            Err(kube::Error::Api(s)) if s.code == 404 => Lookup::Missing,
            Err(e) => Lookup::Failed(e.to_string()),
        };
        lookups.insert(holder, lookup);
    }
    let mut findings = judge(&views, &lookups);
    if let Some(scope) = claims {
        let client = ipam_client(ipam_kubeconfig, &scope.project).await?;
        let listed = list_claims(&client, scope).await?;
        let ids: Vec<String> = cells.iter().map(|c| c.id.clone()).collect();
        let mut judged = judge_claims(
            &listed,
            &ids,
            &views,
            &fleet::Scope {
                project: &scope.project,
                namespace: &scope.namespace,
                location: &scope.location,
                shard_namespace: namespace,
            },
        );
        if let Some(mode) = release {
            let ipam = Ipam::new(
                client,
                Metrics::unregistered(),
                REQUEST_TIMEOUT,
                // An operator's run reports each failure; nothing is gained by refusing the rest.
                Breaker::new(u32::MAX, Duration::from_secs(1)),
            );
            release_orphans(&mut judged, &listed, cells, &ipam, mode).await;
        }
        findings.extend(judged.into_iter().map(|j| j.finding));
    }
    Ok(findings)
}

/// Releases (or, in a dry run, confirms) each orphan in `judged`, recording what was done.
async fn release_orphans(
    judged: &mut [Judged],
    claims: &[IPClaim],
    cells: &[AuditedCell],
    ipam: &Ipam,
    mode: ReleaseMode,
) {
    for j in judged.iter_mut() {
        let Some(orphan) = &j.orphan else { continue };
        let claim = &claims[orphan.claim];
        let outcome = if let Some(why) = &orphan.blocked {
            left(why.clone())
        } else if orphan.legacy && !mode.legacy {
            left("a claim of the Go controller: released only with --include-legacy-claims".into())
        } else if orphan.legacy {
            release_legacy(claim, cells, ipam, mode).await
        } else {
            match cells.iter().find(|c| c.id == j.finding.cell) {
                Some(cell) => release_marked(claim, cell, ipam, mode).await,
                None => left(format!("cell {} was not given", j.finding.cell)),
            }
        };
        j.finding.release = Some(outcome);
    }
}

fn left(reason: String) -> Release {
    Release {
        action: ReleaseAction::Left,
        reason,
    }
}

fn released(freed: Freed) -> Release {
    match freed {
        Freed::Released => Release {
            action: ReleaseAction::Released,
            reason: "deleted by name (the name is its incarnation's alone); IPAM frees its address"
                .into(),
        },
        Freed::Held => left(
            "the shard incarnation it was made for lives, or a live shard records it (read just now)"
                .into(),
        ),
        Freed::AlreadyGone => left("already gone (released by someone else meanwhile)".into()),
        Freed::Replaced => left(
            "the claim of that name is another object now (made after the claims were listed); it is kept"
                .into(),
        ),
    }
}

fn would_release() -> Release {
    Release {
        action: ReleaseAction::WouldRelease,
        reason: "still orphaned when its shard was read just now; nothing was deleted (--yes releases it)".into(),
    }
}

/// Releases `claim` through the controller's release path, or in a dry run only judges it: whose
/// it is (`vouch` for a Go controller's claim), then `read` for its shard, read live now.
async fn release_through<R, Fut>(
    claim: &IPClaim,
    cell: &str,
    vouch: Vouch<'_>,
    read: R,
    ipam: &Ipam,
    mode: ReleaseMode,
) -> Release
where
    R: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Result<Option<LiveShard>, kube::Error>>,
{
    let whose = match whose(claim, cell, vouch) {
        Ok(w) => w,
        Err(why) => return left(format!("never released automatically: {why}")),
    };
    if !mode.delete {
        return match judge_release(claim, &whose, read).await {
            Ok(Decision::Gone) => would_release(),
            Ok(_) => released(Freed::Held),
            Err(e) => left(e.to_string()),
        };
    }
    match release(ipam, claim, &whose, read, || true).await {
        Ok(freed) => released(freed),
        Err(e) => left(e.to_string()),
    }
}

/// A claim of an audited cell: its shard read live in that cell.
async fn release_marked(
    claim: &IPClaim,
    cell: &AuditedCell,
    ipam: &Ipam,
    mode: ReleaseMode,
) -> Release {
    let read = |ns: String, name: String| async move {
        live_shard(&cell.client, &ns, &name, REQUEST_TIMEOUT).await
    };
    release_through(claim, &cell.id, Vouch::None, read, ipam, mode).await
}

/// A claim of the Go controller: no shard of its namespace/name may live in any audited cell,
/// each read live.
async fn release_legacy(
    claim: &IPClaim,
    cells: &[AuditedCell],
    ipam: &Ipam,
    mode: ReleaseMode,
) -> Release {
    let read = |ns: String, name: String| async move {
        for cell in cells {
            if let Some(live) = live_shard(&cell.client, &ns, &name, REQUEST_TIMEOUT).await? {
                return Ok(Some(live));
            }
        }
        Ok(None)
    };
    release_through(claim, "", Vouch::LegacyByOperator, read, ipam, mode).await
}

/// What a release run did, in one line.
fn release_summary(findings: &[Finding], mode: ReleaseMode) -> String {
    let count = |action: ReleaseAction| {
        findings
            .iter()
            .filter(|f| f.release.as_ref().is_some_and(|r| r.action == action))
            .count()
    };
    let left = count(ReleaseAction::Left);
    if mode.delete {
        format!(
            "released {} orphaned claim(s), left {left}",
            count(ReleaseAction::Released)
        )
    } else {
        format!(
            "dry run: {} orphaned claim(s) would be released, {left} left; nothing was deleted (--yes releases them)",
            count(ReleaseAction::WouldRelease)
        )
    }
}

/// A client for one project's control plane, from the kubeconfig naming Milo's base URL.
async fn ipam_client(kubeconfig: &Path, project: &str) -> Result<kube::Client> {
    egress_address::ipam::ipam_client(kubeconfig, project)
        .await
        .with_context(|| format!("building the IPAM client from {}", kubeconfig.display()))
}

/// Every claim in the scope's namespace, read page by page.
async fn list_claims(client: &kube::Client, scope: &ClaimScope) -> Result<Vec<IPClaim>> {
    let api: Api<IPClaim> = Api::namespaced(client.clone(), &scope.namespace);
    let mut claims = vec![];
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.with_context(|| {
            format!(
                "listing IPClaims in project {:?} namespace {:?} (--orphaned-claims needs list on ipclaims)",
                scope.project, scope.namespace
            )
        })?;
        claims.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(claims)
}

/// Whom a claim says it was made for.
fn claim_marks(claim: &IPClaim) -> ClaimMarks {
    let get = |key: &str| claim.annotations().get(key).cloned();
    ClaimMarks {
        cell: get(ANNOTATION_CELL),
        namespace: get(ANNOTATION_SHARD_NAMESPACE),
        name: get(ANNOTATION_SHARD_NAME),
        uid: get(ANNOTATION_SHARD_UID),
    }
}

fn view(cell: &str, shard: &EgressShard) -> ShardView {
    ShardView {
        cell: cell.to_string(),
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

fn print_table(out: &mut impl Write, findings: &[Finding], cells: bool) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = findings
        .iter()
        .map(|f| {
            let mut detail = f.detail.clone();
            if let Some(r) = &f.release {
                detail = match r.action {
                    ReleaseAction::Left => format!("left: {}; {detail}", r.reason),
                    action => format!("{}; {detail}", action.as_str()),
                };
            }
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
                detail,
            ]
        })
        .collect();
    const HEADER: [&str; 5] = ["SHARD", "ADDRESS", "HOLDER", "VERDICT", "DETAIL"];
    if !cells {
        return crate::table::write(out, &HEADER, &rows);
    }
    let with_cell: Vec<[String; 6]> = findings
        .iter()
        .zip(rows)
        .map(|(f, [a, b, c, d, e])| {
            let cell = if f.cell.is_empty() {
                "-".to_string()
            } else {
                f.cell.clone()
            };
            [cell, a, b, c, d, e]
        })
        .collect();
    let [a, b, c, d, e] = HEADER;
    crate::table::write(out, &["CELL", a, b, c, d, e], &with_cell)
}
