//! What operators and their tools read off the controller: `/metrics` (as `promtool` and the
//! OpenMetrics rules judge it, with every family carrying samples), the log lines, `--version`,
//! completion scripts, and the metric table of docs/operations.md against what is emitted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use egress_address::connect::kubeconfig::{Transport, following_cell_client};
use egress_address::ipam::following_ipam_client;
use egress_address::metrics::{ReconcileResult, encode};
use egress_address::{Controller, Metrics};
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::binary::{Launch, Proc, http_get, http_get_with, run, stderr, wait_ready};
use crate::common::*;

const CTRL: &str = r#"controller="egressshardaddress""#;

/// The IPAM kubeconfig under another name for the same server (`localhost`), so that the two
/// planes' requests are told apart by host.
fn ipam_kubeconfig_by_name(plane: &Plane) -> (PathBuf, String, String) {
    let text = plane.kubeconfig_text();
    let port = text
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the kubeconfig names the loopback server")
        .to_string();
    let path = plane.dir().join("ipam-by-name.kubeconfig");
    std::fs::write(
        &path,
        text.replace("http://127.0.0.1:", "http://localhost:"),
    )
    .unwrap();
    (
        path,
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
    )
}

/// One sample line: name, labels, value.
type Sample = (String, Vec<(String, String)>, String);

/// Splits a sample line; `None` when it is not one.
fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        loop {
            let (i, c) = chars.next()?;
            match c {
                '}' => {
                    rest = &inner[i + 1..];
                    break;
                }
                ',' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => value.push(chars.next()?.1),
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                c => key.push(c),
            }
        }
    }
    let value = rest.trim().split(' ').next()?.to_string();
    Some((name, labels, value))
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// A family as an exposition declares it, and its samples.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    samples: Vec<Sample>,
}

/// Reads an OpenMetrics exposition into its families, and everything in it that breaks the
/// OpenMetrics text rules (or leaves a family without samples).
fn openmetrics(text: &str) -> (BTreeMap<String, Family>, Vec<String>) {
    let mut problems = Vec::new();
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current: Option<String> = None;
    if !text.ends_with("# EOF\n") {
        problems.push("the exposition does not end with `# EOF`".to_string());
    }
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        if *line == "# EOF" {
            if n + 1 != lines.len() {
                problems.push(format!("line {n}: `# EOF` before the end"));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            if families.contains_key(name) {
                problems.push(format!("{name}: declared twice (its samples are split)"));
            }
            if !valid_name(name) {
                problems.push(format!("{name}: not a valid metric name"));
            }
            if !matches!(
                kind,
                "counter"
                    | "gauge"
                    | "histogram"
                    | "gaugehistogram"
                    | "summary"
                    | "info"
                    | "stateset"
                    | "unknown"
            ) {
                problems.push(format!("{name}: unknown type {kind:?}"));
            }
            if kind == "counter" && name.ends_with("_total") {
                problems.push(format!(
                    "{name}: a counter family's name carries no `_total` (its samples do)"
                ));
            }
            families.insert(
                name.to_string(),
                Family {
                    kind: kind.to_string(),
                    samples: Vec::new(),
                },
            );
            current = Some(name.to_string());
            continue;
        }
        if let Some(rest) = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# UNIT "))
        {
            let name = rest.split(' ').next().unwrap_or_default();
            if families.contains_key(name) && current.as_deref() != Some(name) {
                problems.push(format!("{name}: metadata after another family began"));
            }
            continue;
        }
        if line.starts_with('#') {
            problems.push(format!(
                "line {n}: a comment OpenMetrics does not allow: {line}"
            ));
            continue;
        }
        let Some((name, labels, value)) = parse_sample(line) else {
            problems.push(format!("line {n}: not a sample: {line}"));
            continue;
        };
        let Some(family) = current.as_deref() else {
            problems.push(format!("{name}: a sample before any TYPE"));
            continue;
        };
        let kind = families[family].kind.clone();
        let suffixes: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_count", "_sum", "_created"],
            "info" => &["_info"],
            _ => &[""],
        };
        if !suffixes.iter().any(|s| name == format!("{family}{s}")) {
            problems.push(format!(
                "{name}: not a sample name of {kind} family {family} (one of {suffixes:?})"
            ));
        }
        if name.ends_with("_bucket") && !labels.iter().any(|(k, _)| k == "le") {
            problems.push(format!("{name}: a bucket without `le`"));
        }
        for (k, _) in &labels {
            if !valid_name(k) || k.contains(':') {
                problems.push(format!("{name}: label name {k:?} is not valid"));
            }
        }
        if value.parse::<f64>().is_err() && !["+Inf", "-Inf", "NaN"].contains(&value.as_str()) {
            problems.push(format!("{name}: value {value:?} is not a number"));
        }
        families
            .get_mut(family)
            .unwrap()
            .samples
            .push((name, labels, value));
    }
    for (name, family) in &families {
        if family.samples.is_empty() {
            problems.push(format!("{name}: no samples"));
        }
        if family.kind == "histogram"
            && !family
                .samples
                .iter()
                .any(|(_, labels, _)| labels.iter().any(|(k, v)| k == "le" && v == "+Inf"))
        {
            problems.push(format!("{name}: a histogram without a `+Inf` bucket"));
        }
    }
    (families, problems)
}

/// The value of the sample of `exposition` that is exactly `series` (name and labels as
/// written), if there is one.
fn value_of(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}

#[tokio::test]
async fn the_live_metrics_pass_promtool_and_the_openmetrics_rules() {
    let plane = Plane::start().await;
    let (ipam_kubeconfig, cell_host, ipam_host) = ipam_kubeconfig_by_name(&plane);
    // IPAM fails the first claims: errors, retries and transport errors get samples too.
    plane.set_faults(vec![fault(PLATFORM, "create", "ipclaims", 500)]);
    let p = Proc::launch(
        &plane,
        "observed",
        Launch {
            ipam_kubeconfig: Some(ipam_kubeconfig),
            ..Launch::default()
        },
    );
    wait_ready(&p).await;
    plane.create_shard("watched").await;
    let errors = format!("controller_runtime_reconcile_total{{{CTRL},result=\"error\"}}");
    eventually(15, "a failed reconcile to be counted", || async {
        let (_, body) = http_get(p.metrics, "/metrics").await?;
        (value_of(&body, &errors)? >= 1.0).then_some(())
    })
    .await;
    plane.clear_faults();
    addressed(&plane, "watched").await;
    let success = format!("controller_runtime_reconcile_total{{{CTRL},result=\"success\"}}");
    let created =
        format!("rest_client_requests_total{{code=\"201\",method=\"POST\",host=\"{ipam_host}\"}}");
    let text = eventually(10, "the claim and the success to be counted", || async {
        let (code, head, body) = http_get_with(p.metrics, "/metrics", &[]).await?;
        assert_eq!(code, 200);
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        (value_of(&body, &success)? >= 1.0 && value_of(&body, &created)? >= 1.0).then_some(body)
    })
    .await;
    assert!(!text.contains("# EOF"), "{text}");
    // Both planes are counted, each under its own host.
    for series in [
        format!("rest_client_requests_total{{code=\"200\",method=\"GET\",host=\"{cell_host}\"}}"),
        format!("rest_client_requests_total{{code=\"500\",method=\"POST\",host=\"{ipam_host}\"}}"),
    ] {
        assert!(
            value_of(&text, &series).is_some_and(|v| v >= 1.0),
            "{series} in\n{text}"
        );
    }

    let promtool = localplane::testing::judges::promtool();
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let (code, head, om) = http_get_with(
        p.metrics,
        "/metrics",
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    )
    .await
    .unwrap();
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    let (families, problems) = openmetrics(&om);
    assert!(problems.is_empty(), "{problems:#?}\n{om}");
    for family in [
        "controller_runtime_reconcile",
        "controller_runtime_reconcile_errors",
        "controller_runtime_reconcile_panics",
        "controller_runtime_reconcile_time_seconds",
        "controller_runtime_max_concurrent_reconciles",
        "controller_runtime_active_workers",
        "workqueue_depth",
        "workqueue_adds",
        "workqueue_retries",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "leader_election_master_status",
        "rest_client_requests",
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
        "egress_address_build_info",
        "egress_address_transport_errors",
    ] {
        assert!(families.contains_key(family), "{family} is missing:\n{om}");
    }
    assert_eq!(
        value_of(
            &om,
            "leader_election_master_status{name=\"egress-address-controller.cloud.datumapis.com\"}"
        ),
        Some(1.0)
    );
    assert!(
        value_of(
            &om,
            &format!("workqueue_retries_total{{{CTRL},name=\"egressshardaddress\"}}")
        )
        .is_some_and(|v| v >= 1.0),
        "{om}"
    );
}

#[test]
fn the_checks_of_the_exposition_can_fail() {
    let (_, problems) = openmetrics(
        "# TYPE a_total counter\na_total 1\n# TYPE b gauge\nb_total 1\n# TYPE c histogram\nc_sum 1\n# TYPE a_total counter\n# TYPE e gauge\n",
    );
    let text = problems.join("\n");
    for needle in [
        "does not end with `# EOF`",
        "a_total: a counter family's name carries no `_total`",
        "b_total: not a sample name of gauge family b",
        "c: a histogram without a `+Inf` bucket",
        "a_total: declared twice",
        "e: no samples",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    let (families, problems) = openmetrics(
        "# HELP x_seconds X.\n# TYPE x_seconds histogram\nx_seconds_bucket{le=\"+Inf\",k=\"a\\\"b\"} 2\nx_seconds_sum 1.5\nx_seconds_count 2\n# EOF\n",
    );
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        families["x_seconds"].samples[0].1[1],
        ("k".into(), "a\"b".into())
    );
}

/// Every line parses as JSON; the lines themselves.
fn json_lines(logs: &str) -> Vec<serde_json::Map<String, Value>> {
    logs.lines()
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(Value::Object(o)) => o,
            other => panic!("not a JSON object ({other:?}): {l}"),
        })
        .collect()
}

#[tokio::test]
async fn json_logs_from_go_style_zap_flags_read_as_controller_runtime_writes_them() {
    let plane = Plane::start().await;
    plane.set_faults(vec![fault("cell", "patch", "egressshards", 500)]);
    let mut p = Proc::launch(
        &plane,
        "zap",
        Launch {
            log_flags: Some(&[
                "-zap-encoder",
                "json",
                "-zap-log-level=info",
                "-zap-time-encoding",
                "rfc3339",
            ]),
            ..Launch::default()
        },
    );
    wait_ready(&p).await;
    plane.create_shard("logged").await;
    let log = p.log.clone();
    eventually(15, "a reconcile error to be logged", || async {
        let logs = std::fs::read_to_string(&log).ok()?;
        logs.contains("\"msg\":\"Reconciler error\"").then_some(())
    })
    .await;
    plane.clear_faults();
    addressed(&plane, "logged").await;
    p.sigterm();
    let (code, logs) = p.wait_exit(10).await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(!logs.contains('\u{1b}'), "colour codes in a file: {logs}");
    let lines = json_lines(&logs);
    for line in &lines {
        for key in ["level", "ts", "logger", "msg"] {
            assert!(line.contains_key(key), "{key} missing: {line:?}");
        }
        assert!(!line.contains_key("fields"), "fields are flat: {line:?}");
        let ts = line["ts"].as_str().unwrap();
        assert!(
            ts.len() == "2024-05-06T07:08:09Z".len() && ts.ends_with('Z'),
            "rfc3339: {ts}"
        );
        let level = line["level"].as_str().unwrap();
        assert!(
            ["info", "warn", "error"].contains(&level),
            "level {level} at --zap-log-level=info"
        );
    }
    let find = |msg: &str| {
        lines
            .iter()
            .find(|l| l["msg"] == msg)
            .unwrap_or_else(|| panic!("no {msg:?} line in {logs}"))
    };
    let start = find("starting egress address controller");
    assert_eq!(start["logger"], "setup");
    assert_eq!(start["location"], LOCATION);
    assert_eq!(start["commit"], egress_address::COMMIT);

    let failed = find("Reconciler error");
    assert_eq!(failed["level"], "error");
    assert_eq!(failed["logger"], "controller.egressshardaddress");
    assert_eq!(failed["controller"], "egressshardaddress");
    assert_eq!(failed["controllerKind"], "EgressShard");
    assert_eq!(
        failed["EgressShard"],
        serde_json::json!({"name": "logged", "namespace": SHARD_NS})
    );
    assert_eq!(failed["namespace"], SHARD_NS);
    assert_eq!(failed["name"], "logged");
    assert!(failed["error"].as_str().is_some_and(|e| !e.is_empty()));
    let id = failed["reconcileID"].as_str().unwrap();
    assert_eq!(id.len(), 36, "{id}");

    // Every line of one reconcile carries its ID, and another reconcile has another.
    let assigned = find("assigned an egress shard its public IPv6 address");
    assert_eq!(assigned["logger"], "controller.egressshardaddress");
    let other = assigned["reconcileID"].as_str().unwrap();
    assert_eq!(other.len(), 36);
    assert_ne!(other, id);
    assert!(!logs.contains(ADMIN_TOKEN), "a credential was logged");
}

#[tokio::test]
async fn plain_logs_to_a_file_carry_no_colour_codes() {
    let plane = Plane::start().await;
    let mut p = Proc::launch(
        &plane,
        "plain",
        Launch {
            log_flags: Some(&["-zap-encoder=console"]),
            ..Launch::default()
        },
    );
    wait_ready(&p).await;
    p.sigterm();
    let (code, logs) = p.wait_exit(10).await;
    assert_eq!(code, Some(0), "{logs}");
    assert!(
        logs.contains("starting egress address controller"),
        "{logs}"
    );
    assert!(
        !logs.trim_start().starts_with('{'),
        "plain, not JSON: {logs}"
    );
    assert!(!logs.contains('\u{1b}'), "colour codes in a file: {logs:?}");
}

#[test]
fn version_names_the_commit_and_completions_name_the_flags() {
    let out = run(&["--version"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(localplane::testing::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "egress-address-controller {} (commit {commit})\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert_eq!(egress_address::COMMIT, commit);
    // Go's spelling, as a Deployment written for the Go binary may probe it.
    let go = run(&["-version"], &[]);
    assert_eq!(go.stdout, out.stdout);

    let bash = run(&["completions", "bash"], &[]);
    assert_eq!(bash.status.code(), Some(0), "{}", stderr(&bash));
    let script = String::from_utf8(bash.stdout).unwrap();
    assert!(script.contains("--location"), "{script}");
    assert!(script.contains("egress-address-controller"), "{script}");
    let bad = run(&["completions", "tcsh"], &[]);
    assert_eq!(bad.status.code(), Some(2));
}

/// What the table says of a label's values.
#[derive(Debug, PartialEq)]
enum Values {
    /// `` `l` = `a`, `b` ``: exactly these are emitted.
    Exactly(BTreeSet<String>),
    /// `` `l` = one of `a`, `b` ``: these may be, and nothing else.
    OneOf(BTreeSet<String>),
    /// Values named with other words (`` `Bound`, or IPAM's reason ``), or none named.
    Open,
}

/// One row of the metric table: the name as queried, its type, and its labels.
#[derive(Debug)]
struct DocRow {
    name: String,
    kind: String,
    labels: BTreeMap<String, Values>,
}

/// Backticked spans of `text`, in order.
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The table under `## Metrics` in docs/operations.md. A labels cell lists labels separated by
/// `;`; a label may be followed by `=` and its values (see [`Values`]).
fn metric_table(doc: &str) -> Vec<DocRow> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Metrics"))
        .expect("a Metrics section");
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "metric | type | labels | meaning: {line}");
        let mut labels = BTreeMap::new();
        for spec in cells[2].split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (name_part, values_part) = match spec.split_once(" = ") {
                Some((n, v)) => (n, Some(v)),
                None => (spec, None),
            };
            let name = ticked(name_part)
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("a label in backticks: {line}"));
            let values = values_part.map_or(Values::Open, |v| {
                let listed: BTreeSet<String> = ticked(v).into_iter().collect();
                let words: String = v.split('`').step_by(2).collect();
                let bare = |w: &str| w.chars().all(|c| c == ',' || c.is_whitespace());
                match words.trim_start().strip_prefix("one of") {
                    Some(rest) if bare(rest) => Values::OneOf(listed),
                    _ if bare(&words) => Values::Exactly(listed),
                    _ => Values::Open,
                }
            });
            labels.insert(name, values);
        }
        rows.push(DocRow {
            name: ticked(cells[0]).into_iter().next().unwrap(),
            kind: cells[1].to_string(),
            labels,
        });
    }
    rows
}

/// Everything about the emitted families the table gets wrong.
fn table_mismatches(rows: &[DocRow], families: &BTreeMap<String, Family>) -> Vec<String> {
    let mut problems = Vec::new();
    let queried = |name: &str, family: &Family| match family.kind.as_str() {
        "counter" => format!("{name}_total"),
        _ => name.to_string(),
    };
    let emitted: BTreeMap<String, &Family> = families
        .iter()
        .map(|(name, f)| (queried(name, f), f))
        .collect();
    for row in rows {
        let Some(family) = emitted.get(&row.name) else {
            problems.push(format!("{}: documented, not emitted", row.name));
            continue;
        };
        if family.kind != row.kind {
            problems.push(format!(
                "{}: documented as a {}, emitted as a {}",
                row.name, row.kind, family.kind
            ));
        }
        if family.samples.is_empty() {
            continue;
        }
        let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (_, labels, _) in &family.samples {
            for (k, v) in labels.iter().filter(|(k, _)| k != "le") {
                values.entry(k.clone()).or_default().insert(v.clone());
            }
        }
        let documented: BTreeSet<&String> = row.labels.keys().collect();
        let seen: BTreeSet<&String> = values.keys().collect();
        if documented != seen {
            problems.push(format!(
                "{}: labels documented {documented:?}, emitted {seen:?}",
                row.name
            ));
        }
        for (label, listed) in &row.labels {
            let Some(seen) = values.get(label) else {
                continue;
            };
            match listed {
                Values::Exactly(listed) if listed != seen => problems.push(format!(
                    "{}: `{label}` documented as {listed:?}, emitted {seen:?}",
                    row.name
                )),
                Values::OneOf(listed) if !seen.is_subset(listed) => problems.push(format!(
                    "{}: `{label}` documented as one of {listed:?}, emitted {seen:?}",
                    row.name
                )),
                _ => {}
            }
        }
    }
    for name in emitted.keys() {
        if !rows.iter().any(|r| &r.name == name) {
            problems.push(format!("{name}: emitted, not documented"));
        }
    }
    problems
}

#[tokio::test]
async fn the_metric_table_of_the_runbook_is_what_is_emitted() {
    let plane = Plane::start().await;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    // Built as main builds it: both planes through the connection layer that counts requests.
    let observe = egress_address::connect::connection::counted_by(&metrics);
    let kubeconfig = plane.lp().kubeconfig_path("cell", ADMIN).unwrap();
    let (cell, _) = following_cell_client(
        Some(&kubeconfig),
        Transport::default(),
        Some(observe.clone()),
    )
    .await
    .unwrap();
    let (ipam, _) =
        following_ipam_client(&kubeconfig, PLATFORM, Transport::default(), Some(observe))
            .await
            .unwrap();
    let controller = Controller::new(elected("documented"), cell, ipam, metrics.clone()).unwrap();
    let handle = controller.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::timeout(Duration::from_secs(10), handle.wait_leader())
        .await
        .expect("the controller leads");
    // A refused and a failed claim first, so the families that only a refusal or an outage
    // fills have samples too.
    plane.set_faults(vec![fault(PLATFORM, "create", "ipclaims", 403)]);
    plane.create_shard("documented").await;
    eventually(10, "the refused claim to be counted", || async {
        encode(&registry)
            .contains("egress_address_ipam_refusals_total{reason=\"credential\"}")
            .then_some(())
    })
    .await;
    plane.set_faults(vec![fault(PLATFORM, "create", "ipclaims", 500)]);
    eventually(10, "the failed claim to be counted", || async {
        (metrics.reconcile_count(ReconcileResult::Error) >= 1
            && encode(&registry).contains("egress_address_transport_errors_total{"))
        .then_some(())
    })
    .await;
    plane.clear_faults();
    addressed(&plane, "documented").await;
    eventually(5, "the reconcile to be counted", || async {
        (metrics.reconcile_count(ReconcileResult::Success) >= 1).then_some(())
    })
    .await;
    // And a release.
    plane.create_shard("released").await;
    addressed(&plane, "released").await;
    plane.delete_shard("released").await;
    eventually(10, "the release to be counted", || async {
        encode(&registry)
            .contains("egress_address_claim_releases_total{outcome=\"released\"}")
            .then_some(())
    })
    .await;
    let (families, _) = openmetrics(&encode(&registry));
    let _ = stop.send(());
    task.await.unwrap().unwrap();

    let doc =
        std::fs::read_to_string(localplane::testing::workspace_root().join("docs/operations.md"))
            .unwrap();
    let rows = metric_table(&doc);
    assert!(rows.len() > 20, "{rows:#?}");
    let problems = table_mismatches(&rows, &families);
    assert!(
        problems.is_empty(),
        "docs/operations.md, Metrics:\n{problems:#?}"
    );
}

#[test]
fn the_table_check_can_fail() {
    let doc = "# Runbook\n\n## Metrics\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n| `a_total` | counter | `kind` = `x`, `y` | |\n| `b` | gauge | `outcome` = `Bound`, or IPAM's reason | |\n| `gone` | gauge | | |\n| `d_total` | counter | `cause` = one of `dns`, `reset` | |\n\n## Next\n";
    let rows = metric_table(doc);
    let (families, _) = openmetrics(
        "# TYPE a counter\na_total{kind=\"x\"} 1\na_total{kind=\"z\"} 1\n# TYPE b gauge\nb{outcome=\"Other\",extra=\"1\"} 1\n# TYPE c gauge\nc 1\n# TYPE d counter\nd_total{cause=\"dns\"} 1\nd_total{cause=\"tls\"} 1\n# EOF\n",
    );
    assert_eq!(rows[1].labels["outcome"], Values::Open);
    let text = table_mismatches(&rows, &families).join("\n");
    for needle in [
        "a_total: `kind` documented as {\"x\", \"y\"}, emitted {\"x\", \"z\"}",
        "b: labels documented {\"outcome\"}, emitted {\"extra\", \"outcome\"}",
        "gone: documented, not emitted",
        "c: emitted, not documented",
        "d_total: `cause` documented as one of {\"dns\", \"reset\"}, emitted {\"dns\", \"tls\"}",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
}
