//! Log lines shaped the way controller-runtime's zap logger writes them, so that a pipeline built
//! for Go controllers reads these too: one JSON object per line with `level` (lower case),
//! `ts`, `logger` and `msg` first, then every field at the top level (the span's fields, such
//! as a reconcile's `controller`, object and `reconcileID`, before the event's own), and a
//! `stacktrace` last when one is asked for.
//!
//! The plain format is tracing's own, without colour codes unless stderr is a terminal.

use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The `logger` of reconcile lines, as controller-runtime names a controller's logger.
pub const CONTROLLER_LOGGER: &str = "controller.egressshardaddress";

/// Fields whose value is a JSON object written as text, put into the line as the object itself
/// (a reconcile's `EgressShard: {"name": ..., "namespace": ...}`, as klog's object references
/// are written).
const OBJECT_FIELDS: [&str; 1] = ["EgressShard"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// How `ts` is written: zap's time encoders, by their controller-runtime flag names. Times are
/// always UTC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimeEncoding {
    /// Seconds since the epoch as a float (zap's production default).
    #[default]
    Epoch,
    /// Milliseconds since the epoch as a float.
    Millis,
    /// Nanoseconds since the epoch as an integer.
    Nano,
    /// `2024-05-06T07:08:09.123Z`.
    Iso8601,
    /// `2024-05-06T07:08:09Z`.
    Rfc3339,
    /// `2024-05-06T07:08:09.123456789Z`, trailing zeros dropped.
    Rfc3339Nano,
}

impl FromStr for TimeEncoding {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "epoch" => TimeEncoding::Epoch,
            "millis" => TimeEncoding::Millis,
            "nano" => TimeEncoding::Nano,
            "iso8601" => TimeEncoding::Iso8601,
            "rfc3339" => TimeEncoding::Rfc3339,
            "rfc3339nano" => TimeEncoding::Rfc3339Nano,
            _ => {
                return Err(format!(
                    "invalid time encoding {s:?} (one of epoch, millis, nano, iso8601, rfc3339, rfc3339nano)"
                ));
            }
        })
    }
}

impl TimeEncoding {
    /// `at` as the JSON value of `ts`.
    pub fn json(self, at: SystemTime) -> String {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        match self {
            TimeEncoding::Epoch => format_float(since.as_secs_f64()),
            TimeEncoding::Millis => format_float(since.as_nanos() as f64 / 1e6),
            TimeEncoding::Nano => since.as_nanos().to_string(),
            _ => format!("\"{}\"", self.text(at)),
        }
    }

    /// `at` as text, for the plain format.
    pub fn text(self, at: SystemTime) -> String {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let civil = || {
            let second = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
            jiff::Timestamp::from_second(second)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                .strftime("%Y-%m-%dT%H:%M:%S")
                .to_string()
        };
        let nanos = since.subsec_nanos();
        match self {
            TimeEncoding::Epoch | TimeEncoding::Millis | TimeEncoding::Nano => {
                self.json(at).trim_matches('"').to_string()
            }
            TimeEncoding::Iso8601 => format!("{}.{:03}Z", civil(), nanos / 1_000_000),
            TimeEncoding::Rfc3339 => format!("{}Z", civil()),
            TimeEncoding::Rfc3339Nano => {
                let fraction = format!("{nanos:09}");
                let fraction = fraction.trim_end_matches('0');
                if fraction.is_empty() {
                    format!("{}Z", civil())
                } else {
                    format!("{}.{fraction}Z", civil())
                }
            }
        }
    }
}

fn format_float(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        format!("\"{v}\"")
    }
}

/// `--zap-log-level`: a level name, or a verbosity above 0 (1 is debug, more is more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZapLevel {
    Debug,
    Info,
    Error,
    Verbosity(u8),
}

impl FromStr for ZapLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "debug" => Ok(ZapLevel::Debug),
            "info" => Ok(ZapLevel::Info),
            "error" => Ok(ZapLevel::Error),
            other => match other.parse::<u8>() {
                Ok(n) if n > 0 => Ok(ZapLevel::Verbosity(n)),
                _ => Err(format!(
                    "invalid log level {s:?} (debug, info, error, or an integer above 0)"
                )),
            },
        }
    }
}

impl ZapLevel {
    /// The tracing filter that lets the same lines through. tracing has one level below debug,
    /// so every verbosity past 1 is `trace`.
    pub fn directive(self) -> &'static str {
        match self {
            ZapLevel::Error => "error",
            ZapLevel::Info => "info",
            ZapLevel::Debug | ZapLevel::Verbosity(1) => "debug",
            ZapLevel::Verbosity(_) => "trace",
        }
    }
}

/// `--zap-stacktrace-level`: the level from which lines carry a stack trace. `panic` is
/// accepted and attaches none: no line is logged at that level.
pub fn parse_stacktrace_level(s: &str) -> Result<Option<Level>, String> {
    match s.to_ascii_lowercase().as_str() {
        "info" => Ok(Some(Level::INFO)),
        "warn" => Ok(Some(Level::WARN)),
        "error" => Ok(Some(Level::ERROR)),
        "panic" => Ok(None),
        _ => Err(format!(
            "invalid stacktrace level {s:?} (one of info, warn, error, panic)"
        )),
    }
}

/// Everything the log output is made of, resolved from the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    pub format: LogFormat,
    /// A filter in `RUST_LOG` syntax.
    pub filter: String,
    pub time: TimeEncoding,
    /// Lines at this level or more severe carry a `stacktrace` (JSON only).
    pub stacktrace: Option<Level>,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            format: LogFormat::Plain,
            filter: "info".into(),
            time: TimeEncoding::default(),
            stacktrace: None,
        }
    }
}

/// Compiles a filter in RUST_LOG syntax, the one way the process reads `--log-level`.
///
/// A field value in a span directive (`[{field=value}]`) is matched as literal text, not as a
/// regular expression: the filter crate compiles such a regex into a dense automaton with no
/// size cap, and a 395-byte value of dots made it allocate 32 MiB (found by the `flags` fuzz
/// target). An operator filters on a field's exact value; nobody needs a pattern there. (The
/// crate's text match also passes a field whose value is the start of the one named; the
/// reconcile span's test in `runtime::worker` pins that, and docs/operations.md warns of it.)
pub fn filter(directives: &str) -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    EnvFilter::builder().with_regex(false).parse(directives)
}

/// Installs the process's log output on stderr.
pub fn init(options: &LogOptions) {
    let filter = filter(&options.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // A log line that cannot be written is lost, nothing more: the subscriber's own report of
    // the failure goes to stderr too, and with stderr a closed pipe that report panics the task
    // that logged (a reconcile, or the shutdown handler).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false);
    match options.format {
        LogFormat::Json => builder
            .fmt_fields(JsonFields)
            .event_format(ZapJson::new(options.time, options.stacktrace))
            .init(),
        LogFormat::Plain => builder
            .with_timer(Clock(options.time))
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
    }
}

/// The plain format's timestamps, in the chosen encoding.
#[derive(Debug, Clone, Copy)]
pub struct Clock(pub TimeEncoding);

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        w.write_str(&self.0.text(SystemTime::now()))
    }
}

/// The `logger` of a line, by the module that logged it: reconcile work is the controller's
/// logger; startup and shutdown (`main`, and the runtime's own lines) are `setup`, as in a
/// kubebuilder `main.go`; other crates are named by their crate.
pub fn logger_for(target: &str) -> &str {
    // (module, logger, whether its submodules log under the same name)
    const NAMED: [(&str, &str, bool); 7] = [
        ("egress_address_controller", "setup", true),
        ("egress_address::runtime", "setup", false),
        ("egress_address::runtime::leader", "leader-election", true),
        // The admin server's own lines; its TLS and its reviews of callers log as the controller.
        ("egress_address::admin", "admin", false),
        ("egress_address::runtime::events", "events", true),
        ("egress_address::config", "config", true),
        ("egress_address", CONTROLLER_LOGGER, true),
    ];
    for (module, logger, nested) in NAMED {
        if let Some(rest) = target.strip_prefix(module)
            && (rest.is_empty() || (nested && rest.starts_with("::")))
        {
            return logger;
        }
    }
    target.split("::").next().unwrap_or(target)
}

/// zap's lower-case level names; tracing's `trace` is one verbosity past debug, which zap
/// writes as `Level(-2)`.
pub fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "Level(-2)",
    }
}

/// The JSON line format.
#[derive(Debug, Clone, Copy)]
pub struct ZapJson {
    time: TimeEncoding,
    stacktrace: Option<Level>,
}

impl ZapJson {
    pub fn new(time: TimeEncoding, stacktrace: Option<Level>) -> Self {
        Self { time, stacktrace }
    }
}

impl<S, N> FormatEvent<S, N> for ZapJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        use tracing_log::NormalizeEvent;
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut fields = Members::default();
        event.record(&mut fields);

        let mut line = String::with_capacity(256);
        line.push_str("{\"level\":\"");
        line.push_str(level_name(meta.level()));
        line.push_str("\",\"ts\":");
        line.push_str(&self.time.json(SystemTime::now()));
        line.push_str(",\"logger\":");
        push_json_str(&mut line, logger_for(meta.target()));
        line.push_str(",\"msg\":");
        push_json_str(&mut line, fields.message.as_deref().unwrap_or_default());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(recorded) = extensions.get::<FormattedFields<N>>()
                    && !recorded.fields.is_empty()
                {
                    line.push(',');
                    line.push_str(&recorded.fields);
                }
            }
        }
        if !fields.out.is_empty() {
            line.push(',');
            line.push_str(&fields.out);
        }
        if self.stacktrace.is_some_and(|at| *meta.level() <= at) {
            line.push_str(",\"stacktrace\":");
            push_json_str(
                &mut line,
                &std::backtrace::Backtrace::force_capture().to_string(),
            );
        }
        line.push('}');
        writeln!(writer, "{line}")
    }
}

/// Span fields as JSON members, kept with the span for every line logged inside it.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonFields;

impl<'writer> FormatFields<'writer> for JsonFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut members = Members::default();
        fields.record(&mut members);
        writer.write_str(&members.out)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut members = Members::default();
        fields.record(&mut members);
        if !members.out.is_empty() {
            if !current.fields.is_empty() {
                current.fields.push(',');
            }
            current.fields.push_str(&members.out);
        }
        Ok(())
    }
}

/// Collects fields as `"name":value` members; the message apart.
#[derive(Default)]
struct Members {
    out: String,
    message: Option<String>,
}

impl Members {
    fn key(&mut self, field: &Field) -> bool {
        // Lines bridged from the `log` crate carry their origin as fields; the metadata already
        // says it.
        if field.name().starts_with("log.") {
            return false;
        }
        if !self.out.is_empty() {
            self.out.push(',');
        }
        push_json_str(&mut self.out, field.name());
        self.out.push(':');
        true
    }

    fn text(&mut self, field: &Field, value: String) {
        if field.name() == "message" {
            self.message = Some(value);
            return;
        }
        if !self.key(field) {
            return;
        }
        let is_object = OBJECT_FIELDS.contains(&field.name())
            && serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&value).is_ok();
        if is_object {
            self.out.push_str(&value);
        } else {
            push_json_str(&mut self.out, &value);
        }
    }

    fn raw(&mut self, field: &Field, value: &str) {
        if self.key(field) {
            self.out.push_str(value);
        }
    }
}

impl Visit for Members {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.raw(field, &format_float(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.raw(field, &value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.raw(field, &value.to_string());
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.raw(field, &value.to_string());
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.raw(field, &value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.raw(field, if value { "true" } else { "false" });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_string());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.text(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.text(field, format!("{value:?}"));
    }
}

fn push_json_str(out: &mut String, s: &str) {
    // Serialising a string cannot fail.
    let _ = write!(
        out,
        "{}",
        serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
    );
}

/// A reconcile's `reconcileID`: a random (version 4) UUID, as controller-runtime gives each.
pub fn reconcile_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The object reference a reconcile line carries, as klog writes one.
pub fn object_ref(namespace: &str, name: &str) -> String {
    serde_json::json!({"name": name, "namespace": namespace}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    impl Buffer {
        fn raw(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone())
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn json_logs(time: TimeEncoding, stacktrace: Option<Level>, f: impl FnOnce()) -> Vec<Value> {
        raw_json_logs(time, stacktrace, f)
            .iter()
            .map(|l| parse(l))
            .collect()
    }

    fn raw_json_logs(
        time: TimeEncoding,
        stacktrace: Option<Level>,
        f: impl FnOnce(),
    ) -> Vec<String> {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(Level::TRACE)
            .with_writer(buffer.clone())
            .fmt_fields(JsonFields)
            .event_format(ZapJson::new(time, stacktrace))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        buffer.raw()
    }

    #[test]
    fn a_reconcile_error_reads_as_controller_runtime_writes_it() {
        let id = reconcile_id();
        let raw = raw_json_logs(TimeEncoding::Epoch, None, || {
            let span = tracing::error_span!(
                target: "egress_address::runtime::worker",
                "reconcile",
                controller = "egressshardaddress",
                EgressShard = %object_ref("galactic-system", "s1"),
                namespace = "galactic-system",
                name = "s1",
                reconcileID = %id,
            );
            let _in = span.enter();
            tracing::error!(target: "egress_address::runtime::worker", error = "boom \"quoted\"", attempt = 3u64, ok = false, "Reconciler error");
        });
        // zap's order: level, ts, logger, msg; then the span's fields, then the event's.
        let first = &raw[0];
        assert!(first.starts_with(r#"{"level":"error","ts":"#), "{first}");
        assert!(
            first.contains(r#","logger":"controller.egressshardaddress","msg":"Reconciler error","controller":"egressshardaddress","#),
            "{first}"
        );
        assert!(first.ends_with(r#","attempt":3,"ok":false}"#), "{first}");
        let line = parse(first);
        let line = line.as_object().unwrap();
        assert_eq!(line["level"], "error");
        assert_eq!(line["logger"], CONTROLLER_LOGGER);
        assert_eq!(line["msg"], "Reconciler error");
        assert_eq!(line["controller"], "egressshardaddress");
        assert_eq!(
            line["EgressShard"],
            serde_json::json!({"name": "s1", "namespace": "galactic-system"})
        );
        assert_eq!(line["namespace"], "galactic-system");
        assert_eq!(line["name"], "s1");
        assert_eq!(line["reconcileID"], id.as_str());
        assert_eq!(line["error"], "boom \"quoted\"");
        assert_eq!(line["attempt"], 3);
        assert_eq!(line["ok"], false);
        assert!(!line.contains_key("fields") && !line.contains_key("stacktrace"));
        let ts = line["ts"].as_f64().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!((now - ts).abs() < 60.0, "{ts} vs {now}");
    }

    #[test]
    fn levels_are_lower_case_and_loggers_follow_the_module() {
        let lines = json_logs(TimeEncoding::Rfc3339, None, || {
            tracing::info!(target: "egress_address_controller", location = "dfw", "starting egress address controller");
            tracing::warn!(target: "egress_address::runtime::leader", "lost the lease");
            tracing::debug!(target: "kube_client::client", "a request");
            tracing::trace!(target: "egress_address::reconcile", "detail");
        });
        let got: Vec<(&str, &str)> = lines
            .iter()
            .map(|l| (l["level"].as_str().unwrap(), l["logger"].as_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("info", "setup"),
                ("warn", "leader-election"),
                ("debug", "kube_client"),
                ("Level(-2)", CONTROLLER_LOGGER),
            ]
        );
        assert_eq!(lines[0]["location"], "dfw");
        let ts = lines[0]["ts"].as_str().unwrap();
        assert_eq!(ts.len(), "2024-05-06T07:08:09Z".len(), "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    }

    #[test]
    fn a_stacktrace_is_attached_from_its_level_on() {
        let raw = raw_json_logs(TimeEncoding::Epoch, Some(Level::WARN), || {
            tracing::info!("fine");
            tracing::warn!("worse");
            tracing::error!(code = 1, "worst");
        });
        let traced: Vec<bool> = raw
            .iter()
            .map(|l| parse(l).get("stacktrace").and_then(Value::as_str).is_some())
            .collect();
        assert_eq!(traced, [false, true, true]);
        let last = &raw[2];
        let at = last.find(r#","stacktrace":""#).unwrap();
        assert!(
            last[..at].ends_with(r#""code":1"#),
            "the stacktrace comes last: {last}"
        );
    }

    #[test]
    fn an_object_field_that_is_not_an_object_stays_text() {
        let lines = json_logs(TimeEncoding::Epoch, None, || {
            tracing::info!(EgressShard = "not json", other = %r#"{"a":1}"#, "x");
        });
        assert_eq!(lines[0]["EgressShard"], "not json");
        assert_eq!(lines[0]["other"], r#"{"a":1}"#);
    }

    #[test]
    fn time_encodings_follow_zap() {
        let at = UNIX_EPOCH + Duration::new(1_715_000_000, 120_000_000);
        assert_eq!(TimeEncoding::Epoch.json(at), "1715000000.12");
        assert_eq!(TimeEncoding::Millis.json(at), "1715000000120");
        assert_eq!(TimeEncoding::Nano.json(at), "1715000000120000000");
        assert_eq!(
            TimeEncoding::Iso8601.json(at),
            "\"2024-05-06T12:53:20.120Z\""
        );
        assert_eq!(TimeEncoding::Rfc3339.json(at), "\"2024-05-06T12:53:20Z\"");
        assert_eq!(
            TimeEncoding::Rfc3339Nano.json(at),
            "\"2024-05-06T12:53:20.12Z\""
        );
        let whole = UNIX_EPOCH + Duration::from_secs(1_715_000_000);
        assert_eq!(
            TimeEncoding::Rfc3339Nano.text(whole),
            "2024-05-06T12:53:20Z"
        );
        assert_eq!(TimeEncoding::Epoch.text(whole), "1715000000");
        for (name, want) in [
            ("epoch", TimeEncoding::Epoch),
            ("millis", TimeEncoding::Millis),
            ("nano", TimeEncoding::Nano),
            ("ISO8601", TimeEncoding::Iso8601),
            ("rfc3339", TimeEncoding::Rfc3339),
            ("rfc3339nano", TimeEncoding::Rfc3339Nano),
        ] {
            assert_eq!(name.parse::<TimeEncoding>(), Ok(want));
        }
        assert!("iso".parse::<TimeEncoding>().is_err());
    }

    #[test]
    fn zap_levels_become_filters() {
        let directive = |s: &str| s.parse::<ZapLevel>().map(ZapLevel::directive);
        assert_eq!(directive("debug"), Ok("debug"));
        assert_eq!(directive("INFO"), Ok("info"));
        assert_eq!(directive("error"), Ok("error"));
        assert_eq!(directive("1"), Ok("debug"));
        assert_eq!(directive("5"), Ok("trace"));
        for bad in ["0", "-1", "warn", "loud", "300"] {
            assert!(directive(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_stacktrace_level("error"), Ok(Some(Level::ERROR)));
        assert_eq!(parse_stacktrace_level("panic"), Ok(None));
        assert!(parse_stacktrace_level("debug").is_err());
    }

    #[test]
    fn reconcile_ids_are_version_4_uuids() {
        let a = reconcile_id();
        assert_ne!(a, reconcile_id());
        let parts: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "{a}");
        assert_eq!(&a[14..15], "4", "{a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn the_controller_logger_is_named_after_the_controller() {
        assert_eq!(
            CONTROLLER_LOGGER,
            format!("controller.{}", crate::metrics::CONTROLLER)
        );
        assert_eq!(logger_for("egress_address"), CONTROLLER_LOGGER);
        assert_eq!(logger_for("egress_address::runtime"), "setup");
        assert_eq!(
            logger_for("egress_address::runtime::worker"),
            CONTROLLER_LOGGER
        );
        assert_eq!(logger_for("egress_addressx::y"), "egress_addressx");
        assert_eq!(logger_for("egress_address::admin"), "admin");
        for nested in ["egress_address::admin::auth", "egress_address::admin::tls"] {
            assert_eq!(logger_for(nested), CONTROLLER_LOGGER, "{nested}");
        }
    }
}
