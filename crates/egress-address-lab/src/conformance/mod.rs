//! `egress-address-lab conformance`: localplane judged by the real kube-apiserver.
//!
//! Every request shape of the catalogue ([`shapes`]) is sent to localplane and to the real
//! control plane (kube-apiserver 1.37 and etcd, [`realcell`]) from the same starting state: the
//! CRDs of `config/crd`, the shipped RBAC of `config/rbac` in `egress-address-system`, and the
//! run's namespace. The two answers are compared ([`compare`]); a difference is either
//! explained ([`explained`], and docs/testing.md says why it stays) or a fault of localplane.
//!
//! The last line is `conformance: N request shapes, M differ, K explained`, where M counts every
//! shape whose answers differ and K those of them that are explained. It exits 0 when every
//! difference is explained, 1 when one is not, 2 when it could not run.

pub mod compare;
pub mod explained;
pub mod scenarios;
pub mod shapes;
pub mod side;

use std::io::Write;
use std::path::Path;

use localplane::Identity as LocalIdentity;
use localplane::testing::{ADMIN, World, workspace_root};
use realcell::{Identity as RealIdentity, RealCell};
use serde::Serialize;
use serde_json::{Value, json};

use compare::{Answer, Difference, differences};
use scenarios::Scenario;
use shapes::{SYSTEM_NAMESPACE, Shape, Who};
use side::{History, Request, Side};

#[derive(clap::Args, Debug, Clone)]
pub struct ConformanceArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    /// Only the shapes whose id contains this.
    #[arg(long)]
    pub only: Option<String>,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the real control plane: {0}")]
    Real(#[from] realcell::Error),
    #[error("localplane: {0}")]
    Local(String),
    #[error("reading {path}: {message}")]
    Config { path: String, message: String },
    #[error("a client with an unknown token: {0}")]
    Client(String),
    #[error("preparing the {side} server: {what} answered {code}: {body}")]
    Prepare {
        side: &'static str,
        what: String,
        code: u16,
        body: String,
    },
    #[error("sending {shape} to the {side} server: {message}")]
    Request {
        side: &'static str,
        shape: String,
        message: String,
    },
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Real(_) => "real",
            Error::Local(_) => "local",
            Error::Config { .. } => "config",
            Error::Client(_) => "client",
            Error::Prepare { .. } => "prepare",
            Error::Request { .. } => "request",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Same,
    Differs,
    Explained,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Differs => "differs",
            Verdict::Explained => "explained",
        }
    }
}

/// One shape's two answers and what their comparison found.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: &'static str,
    pub from: &'static str,
    pub who: Who,
    pub method: &'static str,
    pub request: String,
    pub local: Answer,
    pub real: Answer,
    pub differences: Vec<Difference>,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<&'static str>,
}

/// A run's rows, and the explanations of shapes that no longer differ.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub rows: Vec<Row>,
    pub stale_explanations: Vec<&'static str>,
}

impl Report {
    pub fn differ(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.verdict != Verdict::Same)
            .count()
    }

    pub fn explained(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Explained)
            .count()
    }

    pub fn unexplained(&self) -> Vec<&Row> {
        self.rows
            .iter()
            .filter(|r| r.verdict == Verdict::Differs)
            .collect()
    }

    /// `conformance: N request shapes, M differ, K explained`.
    pub fn summary(&self) -> String {
        format!(
            "conformance: {} request shapes, {} differ, {} explained",
            self.rows.len(),
            self.differ(),
            self.explained()
        )
    }

    /// The table, each difference's details, and the summary as the last line.
    pub fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        let rows: Vec<[String; 7]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.id.to_string(),
                    r.who.label().to_string(),
                    r.method.to_string(),
                    r.request.clone(),
                    r.local.code.to_string(),
                    r.real.code.to_string(),
                    r.verdict.label().to_string(),
                ]
            })
            .collect();
        egress_address_cli::table::write(
            out,
            &["SHAPE", "WHO", "METHOD", "PATH", "LOCAL", "REAL", "VERDICT"],
            &rows,
        )?;
        for r in self.rows.iter().filter(|r| r.verdict != Verdict::Same) {
            writeln!(out, "\n{} ({}):", r.id, r.verdict.label())?;
            if let Some(why) = r.why {
                writeln!(out, "  why it stays: {why}")?;
            }
            for d in &r.differences {
                let mark = if d.explained { " (explained)" } else { "" };
                writeln!(
                    out,
                    "  {}: localplane {}, real {}{mark}",
                    d.path, d.local, d.real
                )?;
            }
        }
        for id in &self.stale_explanations {
            writeln!(
                out,
                "\n{id}: explained, but its answers no longer differ; remove the explanation"
            )?;
        }
        writeln!(out, "{}", self.summary())
    }
}

/// The command: exit 0 when every difference is explained, 1 when one is not, 2 when it could
/// not run.
pub async fn main(args: &ConformanceArgs) -> u8 {
    let wanted = |id: &str| args.only.as_deref().is_none_or(|o| id.contains(o));
    let shapes: Vec<Shape> = shapes::catalogue()
        .into_iter()
        .filter(|s| wanted(s.id))
        .collect();
    let scenarios: Vec<Scenario> = scenarios::catalogue()
        .into_iter()
        .filter(|s| wanted(s.id))
        .collect();
    let report = match run(shapes, scenarios).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: {e}");
            return 2;
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match args.output {
        Output::Table => report.write_table(&mut out),
        Output::Json => {
            let mut v = serde_json::to_value(&report).unwrap_or(Value::Null);
            v["summary"] = json!({"shapes": report.rows.len(), "differ": report.differ(),
                                  "explained": report.explained(), "line": report.summary()});
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&v).unwrap_or_default()
            )
        }
    };
    if let Err(e) = written {
        eprintln!("Error: writing the report: {e}");
        return 2;
    }
    if report.unexplained().is_empty() {
        0
    } else {
        1
    }
}

/// Starts both servers, prepares them alike, replays `shapes` on both and compares.
pub async fn run(shapes: Vec<Shape>, scenarios: Vec<Scenario>) -> Result<Report, Error> {
    let config = workspace_root().join("config");
    // ConfigMaps without the watch cache: their continued lists and watches come from etcd, so
    // an etcd compaction reaches them (seq-configmaps-continue-compacted).
    let real_cell = RealCell::start_with(&["--watch-cache-sizes=configmaps#0"]).await?;
    let result = run_on(&real_cell, &config, shapes, scenarios).await;
    let stopped = real_cell.stop().await;
    let report = result?;
    stopped?;
    Ok(report)
}

/// The user name the shipped RBAC grants: the ServiceAccount in the kustomization's namespace.
const CONTROLLER_USER: &str =
    "system:serviceaccount:egress-address-system:egress-address-controller";
const LOCAL_CONTROLLER: &str = "conformance-controller";
const LOCAL_OPERATOR: &str = "conformance-operator";
const NOBODY_TOKEN: &str = "a-token-nobody-issued";

async fn run_on(
    real_cell: &RealCell,
    config: &Path,
    shapes: Vec<Shape>,
    scenarios: Vec<Scenario>,
) -> Result<Report, Error> {
    real_cell
        .install_crds(&config.join("crd/network.datumapis.com_egressshards.yaml"))
        .await?;
    let world = World::builder(config)
        .identity(LocalIdentity {
            name: LOCAL_CONTROLLER.into(),
            token: format!("{LOCAL_CONTROLLER}-token"),
            user: Some(CONTROLLER_USER.into()),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{SYSTEM_NAMESPACE}"),
            ],
            admin: false,
            // The test control plane's token file gives each identity the uid
            // `testcluster-<name>`; the same credential here.
            uid: Some("testcluster-controller".into()),
        })
        .identity(LocalIdentity {
            uid: Some("testcluster-operator".into()),
            ..LocalIdentity::user(
                LOCAL_OPERATOR,
                &format!("{LOCAL_OPERATOR}-token"),
                "operator",
            )
        })
        .rbac(true)
        .object("cell", operator_view_role())
        .object("cell", operator_view_binding())
        .start()
        .await
        .map_err(|e| Error::Local(e.to_string()))?;

    let result = async {
        let local = Side {
            name: "localplane",
            admin: world.client("cell", ADMIN),
            controller: world.client("cell", LOCAL_CONTROLLER),
            operator: world.client("cell", LOCAL_OPERATOR),
            nobody: nobody(world.lp().http_config("cell", ADMIN))?,
            operator_token: format!("{LOCAL_OPERATOR}-token"),
            history: History::Local(
                world
                    .lp()
                    .plane("cell")
                    .ok_or_else(|| Error::Local("no cell plane".into()))?,
            ),
        };
        let real = Side {
            name: "real",
            admin: real_cell.client(RealIdentity::Admin).await?,
            controller: real_cell.client(RealIdentity::Controller).await?,
            operator: real_cell.client(RealIdentity::Operator).await?,
            nobody: nobody(real_config(real_cell).await?)?,
            operator_token: token_of(&real_cell.kubeconfig(RealIdentity::Operator))?,
            history: History::Real(real_cell),
        };
        let ns = format!("conformance-{}", short_id());
        let starting_state = starting_state(config, &ns)?;
        for side in [&local, &real] {
            side.prepare(&starting_state).await?;
        }
        let mut rows = Vec::new();
        for shape in shapes {
            let vars = Vars {
                ns: ns.clone(),
                name: shape.id.to_string(),
                rv: String::new(),
                uid: String::new(),
                operator_token: String::new(),
            };
            let (l, r) = tokio::join!(replay(&local, &shape, &vars), replay(&real, &shape, &vars));
            rows.push(Row::new(
                shape.id,
                shape.from,
                shape.who,
                shape.method,
                shape.request_line(),
                l?,
                r?,
            ));
        }
        for scenario in scenarios {
            let (l, r) = tokio::join!(scenario.play(&local, &ns), scenario.play(&real, &ns));
            rows.push(Row::new(
                scenario.id,
                scenario.from,
                scenario.who,
                "SEQ",
                scenario.summary.to_string(),
                l?,
                r?,
            ));
        }
        Ok::<_, Error>(rows)
    }
    .await;
    world.shutdown().await;
    let rows = result?;
    let stale_explanations = explained::EXPLAINED
        .iter()
        .filter(|e| {
            rows.iter()
                .any(|r| r.id == e.shape && !r.differences.iter().any(|d| d.explained))
        })
        .map(|e| e.shape)
        .collect();
    Ok(Report {
        rows,
        stale_explanations,
    })
}

impl Row {
    /// The row of one shape: its answers compared, each difference marked explained where the
    /// shape's explanation pins its path.
    fn new(
        id: &'static str,
        from: &'static str,
        who: Who,
        method: &'static str,
        request: String,
        local: Answer,
        real: Answer,
    ) -> Row {
        let explanation = explained::of(id);
        let mut diffs = differences(&local, &real);
        for d in &mut diffs {
            d.explained = explanation.is_some_and(|e| e.covers(d));
        }
        let verdict = if diffs.is_empty() {
            Verdict::Same
        } else if diffs.iter().all(|d| d.explained) {
            Verdict::Explained
        } else {
            Verdict::Differs
        };
        Row {
            id,
            from,
            who,
            method,
            request,
            local,
            real,
            differences: diffs,
            verdict,
            why: explanation
                .filter(|_| verdict == Verdict::Explained)
                .map(|e| e.why),
        }
    }
}

/// The bearer token a kubeconfig of the test control plane holds.
fn token_of(path: &Path) -> Result<String, Error> {
    let fail = |message: String| Error::Config {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let doc: Value = serde_saphyr::from_str(&text).map_err(|e| fail(e.to_string()))?;
    doc["users"][0]["user"]["token"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| fail("no users[0].user.token".into()))
}

/// A few random hex digits, so a run's namespace is its own on a shared control plane.
fn short_id() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// The real control plane binds `operator` to the bootstrap roles; localplane has no bootstrap
/// policy, so it gets the part of `system:aggregate-to-view` the shapes touch, under the same
/// names.
fn operator_view_role() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "system:aggregate-to-view"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps", "namespaces", "events"],
                   "verbs": ["get", "list", "watch"]}],
    })
}

fn operator_view_binding() -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "testcluster:operator:aggregate-to-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:aggregate-to-view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "operator"}],
    })
}

async fn real_config(cell: &RealCell) -> Result<kube::Config, Error> {
    let path = cell.kubeconfig(RealIdentity::Admin);
    let fail = |message: String| Error::Config {
        path: path.display().to_string(),
        message,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).map_err(|e| fail(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| fail(e.to_string()))
}

/// A client of the same server whose token nobody issued.
fn nobody(mut config: kube::Config) -> Result<kube::Client, Error> {
    config.auth_info = Default::default();
    config.auth_info.token = Some(NOBODY_TOKEN.to_string().into());
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

/// The objects both servers start with, in order: the run's namespace, the controller's, and the
/// shipped RBAC placed in it as the kustomization places it.
fn starting_state(config: &Path, ns: &str) -> Result<Vec<Value>, Error> {
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let mut objects = vec![namespace(ns), namespace(SYSTEM_NAMESPACE)];
    objects.extend(shipped_rbac(&config.join("rbac"))?);
    // Who may read the controller's /metrics is the installer's choice; the operator, here.
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "conformance:metrics-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "egress-address-metrics-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "operator"}],
    }));
    Ok(objects)
}

/// The shipped RBAC ([`crate::cell::shipped_rbac`]), as a conformance error.
fn shipped_rbac(dir: &Path) -> Result<Vec<Value>, Error> {
    crate::cell::shipped_rbac(dir).map_err(|e| Error::Config {
        path: e.path,
        message: e.message,
    })
}

/// The values a shape's templates are filled with.
#[derive(Debug, Clone)]
struct Vars {
    ns: String,
    name: String,
    rv: String,
    uid: String,
    /// The operator's bearer token on the server the shape goes to.
    operator_token: String,
}

impl Vars {
    fn fill(&self, s: &str) -> String {
        s.replace("{ns}", &self.ns)
            .replace("{sys}", SYSTEM_NAMESPACE)
            .replace("{name}", &self.name)
            .replace("{rv}", &self.rv)
            .replace("{uid}", &self.uid)
            .replace("{operator-token}", &self.operator_token)
    }

    fn fill_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.fill(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.fill_value(i)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.fill_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// Sends `shape` to `side`: its setup, then the shape itself (a failed setup step is the
/// answer), with the facts of its resourceVersion against the setup's last write.
async fn replay(side: &Side<'_>, shape: &Shape, vars: &Vars) -> Result<Answer, Error> {
    let mut vars = vars.clone();
    vars.operator_token = side.operator_token.clone();
    for object in &shape.setup {
        let answer = side.create(&vars.fill_value(object), shape.id).await?;
        if answer.code >= 300 {
            return Ok(answer);
        }
        vars.rv = answer.body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .into();
        vars.uid = answer.body["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .into();
    }
    let mut uri = vars.fill(&shape.path);
    if !shape.query.is_empty() {
        uri = format!("{uri}?{}", vars.fill(shape.query));
    }
    let request = Request {
        method: shape.method,
        uri,
        content_type: shape.content_type,
        headers: &shape.headers,
        body: shape
            .body
            .as_ref()
            .map(|b| vars.fill_value(b).to_string().into_bytes()),
        watch: shape.is_watch(),
    };
    let mut answer = side.send(shape.who, shape.id, request).await?;
    answer.facts = rv_facts(shape, &vars.rv, &answer);
    Ok(answer)
}

/// How the answer's resourceVersion orders against the setup's last write: a write after it, a
/// read of the object the same, a list not older (the real server's own writes may come in
/// between), an exact list the same. Null when either is missing.
fn rv_facts(shape: &Shape, setup_rv: &str, answer: &Answer) -> Value {
    let (Some(got), Ok(setup)) = (scenarios::rv(&answer.body), setup_rv.parse::<u64>()) else {
        return Value::Null;
    };
    let list = answer.body["kind"]
        .as_str()
        .is_some_and(|k| k.ends_with("List") || k == "Table");
    let exact = shape.query.contains("resourceVersionMatch=Exact");
    let relation = if list && !exact {
        scenarios::not_older(Some(got), Some(setup))
    } else {
        scenarios::order(Some(got), Some(setup))
    };
    json!({"resourceVersion against the setup's last write": relation})
}

#[cfg(test)]
mod tests {
    use super::side::collection_path;
    use super::*;

    #[test]
    fn the_shipped_rbac_lands_in_the_controllers_namespace() {
        let objects = shipped_rbac(&workspace_root().join("config/rbac")).unwrap();
        assert!(objects.len() >= 5);
        for o in &objects {
            if let Some(ns) = o["metadata"].get("namespace") {
                assert_eq!(ns, SYSTEM_NAMESPACE, "{o}");
            }
            for s in o["subjects"].as_array().into_iter().flatten() {
                assert_eq!(s["namespace"], SYSTEM_NAMESPACE, "{o}");
            }
            assert!(collection_path(o).is_some(), "{o}");
        }
    }

    #[test]
    fn templates_are_filled_in_strings_at_any_depth() {
        let vars = Vars {
            ns: "n".into(),
            name: "x".into(),
            rv: "7".into(),
            uid: "u".into(),
            operator_token: "t".into(),
        };
        assert_eq!(
            vars.fill_value(
                &json!({"a": ["{ns}/{name}", {"b": "{rv}{uid}{sys}{operator-token}"}], "c": 1})
            ),
            json!({"a": ["n/x", {"b": format!("7u{SYSTEM_NAMESPACE}t")}], "c": 1})
        );
    }

    #[test]
    fn the_summary_counts_every_difference_and_the_explained_among_them() {
        let answer = |code| Answer {
            code,
            warnings: vec![],
            body: Value::Null,
            facts: Value::Null,
        };
        let row = |id: &'static str, local, real| {
            let s = shapes::catalogue()
                .into_iter()
                .find(|s| s.id == id)
                .unwrap();
            Row::new(s.id, s.from, s.who, s.method, s.request_line(), local, real)
        };
        let report = Report {
            rows: vec![
                row("ctl-shard-get", answer(200), answer(200)),
                row("ctl-lease-get", answer(200), answer(404)),
            ],
            stale_explanations: vec![],
        };
        assert_eq!(
            report.summary(),
            "conformance: 2 request shapes, 1 differ, 0 explained"
        );
        assert_eq!(report.unexplained().len(), 1);
        let mut out = Vec::new();
        report.write_table(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with("conformance: 2 request shapes, 1 differ, 0 explained\n"));
        assert!(text.contains(".code: localplane 200, real 404"), "{text}");
    }
}
