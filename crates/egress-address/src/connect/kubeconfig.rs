//! Reading kubeconfig files into clients, for the cell and for IPAM, without ever repeating what
//! the file holds.
//!
//! A kubeconfig carries credentials (bearer tokens, client keys). The YAML parser quotes the
//! lines around a syntax error, so its message is never passed on: errors name the file and the
//! position only, and every message is scrubbed of every secret-looking value the file holds.

use std::path::Path;

use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tracing::warn;

use super::Error;
use super::connection::{self, Endpoint, Follower, MAX_CELL_ANSWER, RequestObserver};

/// Keys whose values are credentials.
const SECRET_KEYS: &[&str] = &[
    "token",
    "client-key-data",
    "client-certificate-data",
    "password",
    "username",
    "id-token",
    "refresh-token",
    "access-token",
    "client-secret",
    "secret",
];

/// Shortest run of token-like characters treated as a secret even under an unknown key.
const SECRET_RUN: usize = 20;

/// How strictly a kubeconfig's transport is judged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transport {
    /// Send a credential over plain HTTP to a server that is not on this host.
    pub allow_plaintext_credentials: bool,
}

/// Reads a kubeconfig file; any error names the file and never its content. A credential is
/// never sent over plain HTTP to another host (unless allowed), and TLS verification turned off
/// is warned about loudly.
pub async fn load(path: &Path) -> Result<Config, Error> {
    load_with(path, Transport::default()).await
}

/// [`load`] with an explicit transport policy.
pub async fn load_with(path: &Path, transport: Transport) -> Result<Config, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Kubeconfig {
        path: path.display().to_string(),
        message: format!("cannot read it ({})", e.kind()),
    })?;
    let secrets = secrets_in(&text);
    let fail = |message: String| Error::Kubeconfig {
        path: path.display().to_string(),
        message: redact(&message, &secrets),
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| fail(describe_parse_error(&e)))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    check_transport(&config, transport).map_err(fail)?;
    // Its message holds no content of either file, only the token file's path, which a
    // scrubbing of token-like runs would hide.
    check_token(&config).map_err(|message| Error::Kubeconfig {
        path: path.display().to_string(),
        message,
    })?;
    if config.accept_invalid_certs {
        warn!(
            path = %path.display(),
            "TLS VERIFICATION IS OFF (insecure-skip-tls-verify): anyone between this pod and the server can pose as it and take the credential"
        );
    }
    Ok(config)
}

/// Refuses a token no HTTP header may carry (a line break or another control character inside
/// it), inline or in the user's token file: the HTTP stack below kube would panic building the
/// client's Authorization header from an inline one, and fail every request, naming nothing, with
/// one read from the file (kube sends the file's bytes as they are, a final line break included).
/// The file, once read here, is named; its content never is.
fn check_token(config: &Config) -> Result<(), String> {
    use secrecy::ExposeSecret;
    let auth = &config.auth_info;
    let (token, whose) = match (&auth.token, &auth.token_file) {
        // The inline token has precedence over the file, as in kube.
        (Some(token), _) => (
            token.expose_secret().to_string(),
            "the user's token".to_string(),
        ),
        // A file that cannot be read is kube's to report: its error names the file.
        (None, Some(file)) => match std::fs::read_to_string(file) {
            Ok(token) => (token, format!("the user's token file {file:?}")),
            Err(_) => return Ok(()),
        },
        (None, None) => return Ok(()),
    };
    match http::HeaderValue::from_str(&format!("Bearer {token}")) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "{whose} holds a character no HTTP header may carry (a line break or another control character)"
        )),
    }
}

/// Refuses a credential bound for another host over plain HTTP.
fn check_transport(config: &Config, transport: Transport) -> Result<(), String> {
    let url = &config.cluster_url;
    if url.scheme_str() != Some("http") || transport.allow_plaintext_credentials {
        return Ok(());
    }
    let auth = &config.auth_info;
    let has_credential = auth.token.is_some()
        || auth.token_file.is_some()
        || auth.password.is_some()
        || auth.exec.is_some()
        || auth.auth_provider.is_some();
    let host = url.host().unwrap_or_default().trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if has_credential && !loopback {
        return Err(format!(
            "it would send a credential over plain HTTP to {host}; use https (or allow it explicitly with --allow-plaintext-credentials)"
        ));
    }
    Ok(())
}

/// A client from a loaded config; errors name the file the config came from.
pub fn client(config: Config, path: &Path) -> Result<Client, Error> {
    Ok(endpoint(config, path)?.client)
}

/// [`client`], with the server it talks to.
pub fn endpoint(config: Config, path: &Path) -> Result<Endpoint, Error> {
    let server = config.cluster_url.clone();
    let client = Client::try_from(config).map_err(|e| Error::Kubeconfig {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(Endpoint::new(client, &server))
}

/// The cell's client: from `path` when given (a single file), else the in-cluster config or
/// the default kubeconfig (`KUBECONFIG` may list several files; kube's inference merges those).
pub async fn cell_client(path: Option<&Path>) -> Result<Client, Error> {
    match single_file(path) {
        Some(path) => client(load(path).await?, path),
        None => inferred_cell_client().await,
    }
}

/// A kubeconfig path naming one file.
fn single_file(path: Option<&Path>) -> Option<&Path> {
    path.filter(|p| !p.as_os_str().is_empty() && !p.to_string_lossy().contains(':'))
}

async fn inferred_cell_client() -> Result<Client, Error> {
    Ok(inferred_cell_endpoint().await?.client)
}

async fn inferred_cell_endpoint() -> Result<Endpoint, Error> {
    let config = Config::infer()
        .await
        .map_err(|e| Error::CellConfig(format!("no kubeconfig given and none found: {e}")))?;
    check_token(&config).map_err(Error::CellConfig)?;
    let server = config.cluster_url.clone();
    let client = Client::try_from(config).map_err(|e| Error::CellConfig(e.to_string()))?;
    Ok(Endpoint::new(client, &server))
}

/// The cell's client as the controller runs it: a kubeconfig file is followed (a rotated
/// credential is picked up without a restart; in-cluster, kube re-reads the service account
/// token itself), and answers other than watches are bounded by [`MAX_CELL_ANSWER`]. `observe`
/// hears of every request.
pub async fn following_cell_client(
    path: Option<&Path>,
    transport: Transport,
    observe: Option<RequestObserver>,
) -> Result<(Client, Option<Follower>), Error> {
    match single_file(path) {
        Some(path) => {
            let (client, follower) = connection::following(
                path,
                MAX_CELL_ANSWER,
                Arc::new(move |path| {
                    Box::pin(async move { endpoint(load_with(&path, transport).await?, &path) })
                }),
                observe,
            )
            .await?;
            Ok((client, Some(follower)))
        }
        None => Ok((
            connection::bounded_client(inferred_cell_endpoint().await?, MAX_CELL_ANSWER, observe),
            None,
        )),
    }
}

/// What went wrong reading the YAML, without the parser's quotation of the file.
fn describe_parse_error(err: &kube::config::KubeconfigError) -> String {
    let text = err.to_string();
    match position_in(&text) {
        Some((line, column)) => {
            format!("it is not a valid kubeconfig (YAML error at line {line}, column {column})")
        }
        None if text.contains("parse") || text.contains("YAML") || text.contains("yaml") => {
            "it is not a valid kubeconfig (YAML error)".to_string()
        }
        None => text,
    }
}

/// `line N` and `column M` as the parser reports them.
fn position_in(text: &str) -> Option<(u64, u64)> {
    let number_after = |word: &str| {
        let at = text.find(word)? + word.len();
        let digits: String = text[at..]
            .trim_start_matches([' ', ':'])
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    Some((number_after("line")?, number_after("column").unwrap_or(0)))
}

/// Every value in the file that could be a credential: the values of credential keys, and any
/// long run of token-like characters (base64, JWTs), whether or not the YAML around it parses.
pub fn secrets_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim().trim_start_matches("- ").trim_start();
        if let Some((key, value)) = line.split_once(':') {
            let key = key.trim().trim_matches(['"', '\'']);
            let value = value.trim().trim_matches(['"', '\'']).trim();
            if SECRET_KEYS.contains(&key) && value.len() >= 4 {
                found.push(value.to_string());
            }
        }
        for run in line.split(|c: char| !is_token_char(c)) {
            if run.len() >= SECRET_RUN {
                found.push(run.to_string());
            }
        }
    }
    // Longest first, so a secret containing another is scrubbed whole.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found.dedup();
    found
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '_' | '-' | '.')
}

/// Shortest piece of a secret that is scrubbed when a message quotes only part of one.
const SECRET_PIECE: usize = 8;

/// What a message shows in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// `message` with every secret, and any piece of one, replaced: each run of token-like
/// characters that contains a secret, or is a long enough piece of one, becomes `[redacted]`.
pub fn redact(message: &str, secrets: &[String]) -> String {
    let secret_like = |run: &str| {
        secrets
            .iter()
            .any(|s| run.contains(s.as_str()) || (run.len() >= SECRET_PIECE && s.contains(run)))
    };
    let mut out = String::with_capacity(message.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if !run.is_empty() && secret_like(run) {
            out.push_str(REDACTED);
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in message.chars() {
        if is_token_char(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Ik5vdEFSZWFsS2V5In0.c2VjcmV0LXBheWxvYWQ";
    const KEY_DATA: &str = "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2Z0lCQURBTkJna3Foa2lHOXcw";

    fn malformed() -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: milo\n  cluster:\n    server: https://milo.example\nusers:\n- name: egress\n  user:\n    token: {TOKEN}\n   client-key-data: {KEY_DATA}\ncontexts: []\n"
        )
    }

    #[tokio::test]
    async fn a_malformed_kubeconfig_is_named_without_its_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, malformed()).unwrap();
        let err = load(&path).await.unwrap_err().to_string();
        assert!(err.contains(path.to_str().unwrap()), "{err}");
        assert!(err.contains("not a valid kubeconfig"), "{err}");
        for secret in [TOKEN, KEY_DATA, &TOKEN[10..40], &KEY_DATA[5..35]] {
            assert!(!err.contains(secret), "leaked {secret:?} in {err}");
        }
    }

    fn kubeconfig(server: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n{user}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        )
    }

    #[tokio::test]
    async fn a_bearer_token_never_goes_over_plain_http_to_another_host() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let token = "    token: a-secret-bearer-token";
        std::fs::write(&path, kubeconfig("http://milo.example:8080", token)).unwrap();
        let err = load(&path).await.unwrap_err().to_string();
        assert!(err.contains("plain HTTP to milo.example"), "{err}");
        assert!(!err.contains("a-secret-bearer-token"), "{err}");
        let allowed = Transport {
            allow_plaintext_credentials: true,
        };
        assert!(load_with(&path, allowed).await.is_ok());
        for local in [
            "http://127.0.0.1:8080",
            "http://[::1]:8080",
            "http://localhost:1",
        ] {
            std::fs::write(&path, kubeconfig(local, token)).unwrap();
            assert!(load(&path).await.is_ok(), "{local}");
        }
        std::fs::write(&path, kubeconfig("https://milo.example", token)).unwrap();
        assert!(load(&path).await.is_ok());
        std::fs::write(&path, kubeconfig("http://milo.example", "    {}")).unwrap();
        assert!(load(&path).await.is_ok(), "no credential, nothing to leak");
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named() {
        let err = load(Path::new("/nonexistent/ipam-kubeconfig"))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/ipam-kubeconfig"), "{err}");
        assert!(err.contains("cannot read it"), "{err}");
    }

    #[test]
    fn secrets_are_found_even_where_the_yaml_breaks() {
        let found = secrets_in(&malformed());
        assert!(found.iter().any(|s| s == TOKEN), "{found:?}");
        assert!(found.iter().any(|s| s == KEY_DATA), "{found:?}");
        let text = format!(
            "parser said: `    token: {TOKEN}` and `{}`",
            &KEY_DATA[3..30]
        );
        let clean = redact(&text, &found);
        assert!(!clean.contains(&TOKEN[..20]), "{clean}");
        assert!(!clean.contains(&KEY_DATA[20..30]), "{clean}");
        assert!(clean.starts_with("parser said"));
        assert_eq!(
            redact("short hunter22 word", &["hunter22".into()]),
            "short [redacted] word"
        );
    }

    #[test]
    fn positions_are_read_from_the_parser_message() {
        assert_eq!(
            position_in("mapping values are not allowed at line 11, column 19"),
            Some((11, 19))
        );
        assert_eq!(position_in("nothing here"), None);
    }

    #[tokio::test]
    async fn a_token_no_header_may_carry_is_refused_naming_the_file_not_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        // Found probing the endpoint's errors: building a client from this token panicked.
        let user = "    token: \"abc\\ndefSECRETTOKENVALUE1234567890\"";
        std::fs::write(&path, kubeconfig("https://127.0.0.1:1", user)).unwrap();
        let err = load(&path).await.unwrap_err().to_string();
        assert!(err.contains(path.to_str().unwrap()), "{err}");
        assert!(err.contains("no HTTP header may carry"), "{err}");
        assert!(!err.contains("SECRETTOKENVALUE"), "leaked the token: {err}");
    }

    #[tokio::test]
    async fn a_token_file_no_header_may_carry_is_refused_naming_it_not_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let token = dir.path().join("token");
        for content in [
            "SECRETTOKENVALUE1234567890\n",
            "abc\rSECRETTOKENVALUE",
            "SECRET\0TOKENVALUE",
        ] {
            std::fs::write(&token, content).unwrap();
            let user = format!("    tokenFile: {}", token.display());
            std::fs::write(&path, kubeconfig("https://127.0.0.1:1", &user)).unwrap();
            let err = load(&path).await.unwrap_err().to_string();
            assert!(err.contains(path.to_str().unwrap()), "{err}");
            assert!(err.contains(token.to_str().unwrap()), "{err}");
            assert!(err.contains("no HTTP header may carry"), "{err}");
            assert!(!err.contains("SECRET"), "leaked the token: {err}");
        }
        // The same token without the control character is taken.
        std::fs::write(&token, "SECRETTOKENVALUE1234567890").unwrap();
        load(&path).await.unwrap();
    }
}
