//! Kubeconfig and token files as an operator (or a rotated Secret) leaves them: the controller's
//! own loader (`connect::kubeconfig::load_with`, the transport check, then `endpoint`, which
//! builds the client: TLS material, bearer token files), the follower's fingerprint of the file
//! (`connect::follow::fingerprint`), and the scrubbing of secrets from its errors (`secrets_in`,
//! `redact`). The file is a kubeconfig assembled from realistic pieces, or any text; a token
//! file beside it holds any bytes, or a bearer token with control characters and line breaks in
//! it, as an inline `token:` can hold one too (YAML escapes, a block scalar).
//!
//! What must hold: no panic; an error names the file and never repeats a credential the file
//! (or its token file) holds, nor any line of a token cut by a control character; a token no
//! HTTP header may carry, inline or in the token file the config uses, is refused.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use egress_address::connect::follow::fingerprint;
use egress_address::connect::kubeconfig::{
    REDACTED, Transport, endpoint, load_with, redact, secrets_in,
};
use fuzzing::json::text;
use libfuzzer_sys::fuzz_target;
use secrecy::ExposeSecret;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // In memory where there is /dev/shm: both files are rewritten for every input, and on
        // a disk (ext4 starts writing a file out when it is closed after being truncated) the
        // fuzzer spent up to half its time waiting for that, with other builds on the disk.
        let name = format!("egress-fuzz-kubeconfig-{}", std::process::id());
        let shm = std::path::Path::new("/dev/shm").join(&name);
        let dir = if std::fs::create_dir_all(&shm).is_ok() {
            shm
        } else {
            let dir = std::env::temp_dir().join(&name);
            std::fs::create_dir_all(&dir).expect("a scratch folder");
            dir
        };
        trust_one_root(&dir);
        dir
    })
}

/// Every client `endpoint` builds for a loaded kubeconfig verifies servers with the platform's
/// trust store, which rustls-native-certs reads from disk and parses each time: the machine's
/// bundle (144 roots, 220 KB) and folder (292 files) were 40 % of this target's time per input.
/// The fuzzer's bytes never reach that store, so the target points `SSL_CERT_FILE` (which
/// rustls-native-certs honours) at a file of one public root, and no `SSL_CERT_DIR`: the same
/// code reads and parses it, a non-empty store as on any machine, so the client is built as
/// before. Done once, on the first input, before any thread that reads the environment.
fn trust_one_root(dir: &std::path::Path) {
    let roots = dir.join("roots.pem");
    std::fs::write(&roots, include_str!("../src/isrg-root-x2.pem")).expect("the roots file");
    // SAFETY: called once, on the fuzzer's thread, before any runtime starts; libFuzzer's own
    // threads never read the environment.
    unsafe {
        std::env::set_var("SSL_CERT_FILE", &roots);
        std::env::remove_var("SSL_CERT_DIR");
    }
}

const SERVERS: &[&str] = &[
    "https://milo.example",
    "https://10.0.0.1:6443",
    "http://milo.example:8080",
    "http://127.0.0.1:8080",
    "http://[::1]:8080",
    "https://[2001:db8::1]:6443/apis/resourcemanager.miloapis.com/v1alpha1/projects/p/control-plane",
    "milo.example",
    "https://user:pass@milo.example",
    "",
    "://",
];
const TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Ik5vdEFSZWFsS2V5In0.c2VjcmV0LXBheWxvYWQ";
/// The parts a token with control characters is made of: token characters only, each found
/// nowhere else in a generated file, so that any of them in an error is a leak.
const PARTS: &[&str] = &[
    "eyJhbGciOiJFUzI1NiJ9",
    "c2VjcmV0LXBheWxvYWQtdHdv",
    "sha256~Zm9vYmFyYmF6cXV4",
    "k8s-aws-v1.aHR0cHM6Ly9zdHM",
    "0123456789abcdef0123",
];
/// Characters no header may carry (and the tab, which one may), each with its YAML escape.
const CONTROLS: &[(&str, &str)] = &[
    ("\n", "\\n"),
    ("\r\n", "\\r\\n"),
    ("\r", "\\r"),
    ("\0", "\\0"),
    ("\x07", "\\a"),
    ("\x1b", "\\e"),
    ("\x7f", "\\x7F"),
    ("\x0b", "\\v"),
    ("\x0c", "\\f"),
    ("\x01", "\\x01"),
    ("\t", "\\t"),
];

/// A bearer token with control characters in it (at either end too): the token as the
/// controller would read it, and the same written as a YAML double-quoted string's content.
fn controlled_token(u: &mut Unstructured<'_>) -> arbitrary::Result<(String, String)> {
    let (mut raw, mut escaped) = (String::new(), String::new());
    for i in 0..u.int_in_range(1..=3)? {
        if i > 0 || u.ratio(1, 4)? {
            let (c, e) = u.choose(CONTROLS)?;
            raw.push_str(c);
            escaped.push_str(e);
        }
        let part = u.choose(PARTS)?;
        raw.push_str(part);
        escaped.push_str(part);
    }
    if u.ratio(1, 3)? {
        let (c, e) = u.choose(CONTROLS)?;
        raw.push_str(c);
        escaped.push_str(e);
    }
    Ok((raw, escaped))
}

/// An inline `token:` holding line breaks or control characters, as the token it stands for and
/// the YAML it is written as (the user's lines are indented by four spaces).
fn inline_controlled_token(u: &mut Unstructured<'_>) -> arbitrary::Result<(String, String)> {
    if u.ratio(1, 3)? {
        // A block scalar: its lines joined by line breaks, a final one kept (`|`) or not (`|-`).
        let lines: Vec<&str> = (0..u.int_in_range(2..=3)?)
            .map(|_| u.choose(PARTS).copied())
            .collect::<arbitrary::Result<_>>()?;
        let keep = u.ratio(1, 2)?;
        let mut raw = lines.join("\n");
        let mut yaml = format!("token: |{}", if keep { "" } else { "-" });
        for line in &lines {
            yaml.push_str("\n      ");
            yaml.push_str(line);
        }
        if keep {
            raw.push('\n');
        }
        return Ok((raw, yaml));
    }
    let (raw, escaped) = controlled_token(u)?;
    Ok((raw, format!("token: \"{escaped}\"")))
}
const PEM: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFLSFNHeTcrVnFSUU1BMEdDU3FHU0liM0RRRUJDd1VBTUEweEN6QUpCZ05WQkFZVEFsVlQKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

/// The user's lines; the tokens with control characters written inline go to `planted`.
fn user(
    u: &mut Unstructured<'_>,
    token_file: &str,
    planted: &mut Vec<String>,
) -> arbitrary::Result<String> {
    let mut lines = String::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let line = match u.int_in_range(0..=7)? {
            0 => format!("token: {}", text(u, &[TOKEN, "short", ""])?),
            7 => {
                let (raw, yaml) = inline_controlled_token(u)?;
                planted.push(raw);
                yaml
            }
            1 => format!("tokenFile: {token_file}"),
            2 => format!(
                "client-certificate-data: {}",
                text(u, &[PEM, "bm90IGEgY2VydA=="])?
            ),
            3 => format!("client-key-data: {}", text(u, &[PEM, "!!"])?),
            4 => format!(
                "username: admin\n    password: {}",
                text(u, &["correct horse battery staple", "hunter22"])?
            ),
            5 => "{}".to_string(),
            _ => format!(
                "{}: {}",
                text(u, &["as", "as-groups", "impersonate"])?,
                text(u, &["x", "[a, b]"])?
            ),
        };
        lines.push_str("    ");
        lines.push_str(&line);
        lines.push('\n');
    }
    if lines.is_empty() {
        lines.push_str("    {}\n");
    }
    Ok(lines)
}

fn kubeconfig(
    u: &mut Unstructured<'_>,
    token_file: &str,
    planted: &mut Vec<String>,
) -> arbitrary::Result<String> {
    if u.ratio(1, 6)? {
        return String::arbitrary(u);
    }
    if let Some(real) = fuzzing::real(u, "kubeconfig")? {
        return Ok(String::from_utf8_lossy(&real).into_owned());
    }
    let server = text(u, SERVERS)?;
    let mut cluster = format!("    server: {server}\n");
    if u.ratio(1, 4)? {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    if u.ratio(1, 4)? {
        cluster.push_str(&format!(
            "    certificate-authority-data: {}\n",
            text(u, &[PEM, "AAAA"])?
        ));
    }
    let mut out = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n{cluster}users:\n- name: u\n  user:\n{}contexts:\n- name: x\n  context: {{cluster: {}, user: {}, namespace: {}}}\ncurrent-context: {}\n",
        user(u, token_file, planted)?,
        text(u, &["c", "missing"])?,
        text(u, &["u", "missing"])?,
        text(u, &["default", "egress"])?,
        text(u, &["x", "", "other"])?,
    );
    // A file cut short, as a half-written Secret would be.
    if u.ratio(1, 8)? {
        let mut at = u.int_in_range(0..=out.len())?;
        while !out.is_char_boundary(at) {
            at -= 1;
        }
        out.truncate(at);
    }
    Ok(out)
}

/// Whether a bearer token can be sent in an HTTP header, as kube sends it.
fn header_may_carry(token: &str) -> bool {
    http::HeaderValue::from_str(&format!("Bearer {token}")).is_ok()
}

/// Writes the kubeconfig and its token file, then loads the config and builds its client as the
/// controller does: the error's text, if any.
fn attempt(text: &str, token: &[u8], allow: bool) -> Option<String> {
    let path = dir().join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    std::fs::write(dir().join("token"), token).unwrap();
    let outcome = fuzzing::runtime().block_on(async {
        let transport = Transport {
            allow_plaintext_credentials: allow,
        };
        let config = load_with(&path, transport).await?;
        // The token kube would send, if the config gave a client at all: the inline one has
        // precedence over the file's.
        let auth = &config.auth_info;
        let sent = match (&auth.token, &auth.token_file) {
            (Some(inline), _) => Some(inline.expose_secret().to_string()),
            (None, Some(file)) => std::fs::read_to_string(file).ok(),
            (None, None) => None,
        };
        endpoint(config, &path)?;
        if let Some(sent) = sent {
            assert!(
                header_may_carry(&sent),
                "a client was built with a token no header may carry: {sent:?}"
            );
        }
        Ok::<(), egress_address::connect::Error>(())
    });
    outcome.err().map(|e| e.to_string())
}

/// `s` with every token character moved one along its class (`a`→`b`, `z`→`a`, `9`→`0`,
/// `+`↔`/`, ...): as long, of the same characters, and different wherever `s` has one.
fn changed(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'z' => 'a',
            'Z' => 'A',
            '9' => '0',
            'a'..='y' | 'A'..='Y' | '0'..='8' => char::from(c as u8 + 1),
            '+' => '/',
            '/' => '+',
            '=' => '_',
            '_' => '=',
            '-' => '.',
            '.' => '-',
            c => c,
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    fuzzing::alloc::held_to(fuzzing::alloc::CELL, data.len(), || {
        let mut u = Unstructured::new(data);
        let token_path = dir().join("token");
        let path = dir().join("kubeconfig");
        // Tokens with control characters, inline or in the token file: none may show in an error.
        let mut planted = Vec::new();
        let Ok(text) = kubeconfig(&mut u, token_path.to_str().unwrap(), &mut planted) else {
            return;
        };
        let token = match u.ratio(1, 2) {
            Ok(true) => match controlled_token(&mut u) {
                Ok((raw, _)) => {
                    planted.push(raw.clone());
                    raw.into_bytes()
                }
                Err(_) => return,
            },
            Ok(false) => match Vec::<u8>::arbitrary(&mut u) {
                Ok(bytes) => bytes,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let allow = u.ratio(1, 4).unwrap_or(false);
        let outcome = attempt(&text, &token, allow);
        let _ = fingerprint(&[&path, &token_path]);
        let Some(message) = outcome else {
            return;
        };
        let mut secrets = secrets_in(&text);
        let token_text = String::from_utf8_lossy(&token).trim().to_string();
        assert!(message.contains(path.to_str().unwrap()), "{message}");
        let shown = message.replace(path.to_str().unwrap(), "");
        // A planted token, whole or any line of it, is never shown (its parts are found nowhere
        // else in the file, so here no other reading of the text is possible).
        for raw in &planted {
            assert!(
                !shown.contains(raw.as_str()),
                "the error repeats a token {raw:?}: {message}"
            );
            for part in raw.split(|c: char| c.is_control()).filter(|p| p.len() >= 8) {
                assert!(
                    !shown.contains(part),
                    "the error repeats a line of a token {raw:?}: {message}"
                );
            }
        }
        // The token file's content is a credential too, though the kubeconfig never shows it.
        secrets.push(token_text);
        // A credential is made of token characters (a bearer token, base64 key data): a value of
        // other characters (spaces, non-ASCII) under a credential key is no header's token, and the
        // same text elsewhere in the file (a context's name) may rightly be quoted.
        let token_like = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(&b))
        };
        // The scratch folder's paths are long runs of token characters too, and no credential.
        let scratch = dir().to_str().unwrap();
        // A credential's text found in the file more often than under its credential keys is
        // also some other text the error may rightly quote (a context's name that contains the
        // token file's content, say): nothing can tell the two apart.
        let elsewhere = |s: &str| {
            let under_keys = secrets_in(&text).iter().filter(|k| k.contains(s)).count();
            text.matches(s).count() > under_keys
        };
        for secret in secrets.iter().filter(|s| {
            s.len() >= 8
                && token_like(s)
                && !s.contains(scratch)
                && !scratch.contains(s.as_str())
                && !elsewhere(s)
        }) {
            // The product's mark for what it hid is its own word, not the input's.
            if !shown.contains(secret.as_str()) || REDACTED.contains(secret.as_str()) {
                continue;
            }
            // The same text may be the loader's or kube's own wording ("Failed to infer provided
            // configuration"; the fuzzer learns such words from the comparisons here): asked again
            // with the credential changed, fixed wording still says it, a repeated credential not.
            let other = changed(secret);
            let token_again = String::from_utf8_lossy(&token).replace(secret.as_str(), &other);
            let again = attempt(
                &text.replace(secret.as_str(), &other),
                token_again.as_bytes(),
                allow,
            );
            assert!(
                again.is_some_and(|m| m
                    .replace(path.to_str().unwrap(), "")
                    .contains(secret.as_str())),
                "the error repeats a credential {secret:?}: {message}"
            );
        }
        let _ = redact(&message, &secrets);
    })
});
