//! Kubeconfig and token files as an operator (or a rotated Secret) leaves them: the controller's
//! own loader (`connect::kubeconfig::load_with`, the transport check, then `endpoint`, which
//! builds the client: TLS material, bearer token files), the follower's fingerprint of the file
//! (`connect::follow::fingerprint`), and the scrubbing of secrets from its errors (`secrets_in`,
//! `redact`). The file is a kubeconfig assembled from realistic pieces, or any text; a token
//! file beside it holds any bytes.
//!
//! What must hold: no panic; an error names the file and never repeats a credential the file
//! (or its token file) holds.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use egress_address::connect::follow::fingerprint;
use egress_address::connect::kubeconfig::{Transport, endpoint, load_with, redact, secrets_in};
use fuzzing::json::text;
use libfuzzer_sys::fuzz_target;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("egress-fuzz-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    })
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
const PEM: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFLSFNHeTcrVnFSUU1BMEdDU3FHU0liM0RRRUJDd1VBTUEweEN6QUpCZ05WQkFZVEFsVlQKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

fn user(u: &mut Unstructured<'_>, token_file: &str) -> arbitrary::Result<String> {
    let mut lines = String::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let line = match u.int_in_range(0..=6)? {
            0 => format!("token: {}", text(u, &[TOKEN, "short", ""])?),
            1 => format!("tokenFile: {token_file}"),
            2 => format!("client-certificate-data: {}", text(u, &[PEM, "bm90IGEgY2VydA=="])?),
            3 => format!("client-key-data: {}", text(u, &[PEM, "!!"])?),
            4 => format!("username: admin\n    password: {}", text(u, &["correct horse battery staple", "hunter22"])?),
            5 => "{}".to_string(),
            _ => format!("{}: {}", text(u, &["as", "as-groups", "impersonate"])?, text(u, &["x", "[a, b]"])?),
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

fn kubeconfig(u: &mut Unstructured<'_>, token_file: &str) -> arbitrary::Result<String> {
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
        cluster.push_str(&format!("    certificate-authority-data: {}\n", text(u, &[PEM, "AAAA"])?));
    }
    let mut out = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n{cluster}users:\n- name: u\n  user:\n{}contexts:\n- name: x\n  context: {{cluster: {}, user: {}, namespace: {}}}\ncurrent-context: {}\n",
        user(u, token_file)?,
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

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let token_path = dir().join("token");
    let path = dir().join("kubeconfig");
    let Ok(text) = kubeconfig(&mut u, token_path.to_str().unwrap()) else {
        return;
    };
    let Ok(token) = Vec::<u8>::arbitrary(&mut u) else {
        return;
    };
    let allow = u.ratio(1, 4).unwrap_or(false);
    std::fs::write(&path, &text).unwrap();
    std::fs::write(&token_path, &token).unwrap();
    let _ = fingerprint(&[&path, &token_path]);
    let mut secrets = secrets_in(&text);
    let token_text = String::from_utf8_lossy(&token).trim().to_string();
    let rt = fuzzing::runtime();
    let outcome = rt.block_on(async {
        let transport = Transport {
            allow_plaintext_credentials: allow,
        };
        match load_with(&path, transport).await {
            Ok(config) => endpoint(config, &path).map(|_| ()),
            Err(err) => Err(err),
        }
    });
    let Err(err) = outcome else {
        return;
    };
    let message = err.to_string();
    assert!(message.contains(path.to_str().unwrap()), "{message}");
    let shown = message.replace(path.to_str().unwrap(), "");
    // The token file's content is a credential too, though the kubeconfig never shows it.
    secrets.push(token_text);
    // A credential is made of token characters (a bearer token, base64 key data): a value of
    // other characters (spaces, non-ASCII) under a credential key is no header's token, and the
    // same text elsewhere in the file (a context's name) may rightly be quoted.
    let token_like = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=_-.".contains(&b));
    // The scratch folder's paths are long runs of token characters too, and no credential.
    let scratch = dir().to_str().unwrap();
    for secret in secrets
        .iter()
        .filter(|s| s.len() >= 8 && token_like(s) && !s.contains(scratch) && !scratch.contains(s.as_str()))
    {
        if "read the kubeconfig : it is not a valid kubeconfig (YAML error at line , column )"
            .contains(secret.as_str())
        {
            continue;
        }
        assert!(
            !shown.contains(secret.as_str()),
            "the error repeats a credential {secret:?}: {message}"
        );
    }
    let _ = redact(&message, &secrets);
});
