//! `application/vnd.kubernetes.protobuf` request bodies, for the built-in kinds kubectl's typed
//! commands send that way (`create namespace|role|rolebinding|clusterrole|clusterrolebinding|
//! secret|configmap|serviceaccount`, `auth can-i`, `auth whoami`). client-go does not fall back
//! to JSON when a server refuses protobuf (it does only for CBOR), so a server that wants
//! kubectl's own commands to work must read it.
//!
//! A body is the 4-byte magic `k8s\0` and a `runtime.Unknown` {typeMeta, raw}; `raw` is the
//! object in the kind's generated.proto encoding, turned here into the JSON the kind's JSON
//! form would have been. Field numbers are the Kubernetes API's, which never change.

use base64::Engine;
use serde_json::{Map, Value, json};

use super::BuiltinKind;

const MAGIC: &[u8] = b"k8s\x00";

/// How a field's value is encoded, and what it becomes in JSON.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bool,
    /// `metav1.Time`: {seconds, nanos}, RFC 3339 in JSON.
    Time,
    Msg(&'static [Field]),
    MapStr,
    MapBytes,
}

#[derive(Clone, Copy)]
struct Field {
    num: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
}

const fn f(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: false,
    }
}

const fn r(num: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        num,
        name,
        ty,
        repeated: true,
    }
}

use Ty::{Bool, Int, MapBytes, MapStr, Msg, Str, Time};

const OWNER_REFERENCE: &[Field] = &[
    f(1, "kind", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(5, "apiVersion", Str),
    f(6, "controller", Bool),
    f(7, "blockOwnerDeletion", Bool),
];
const OBJECT_META: &[Field] = &[
    f(1, "name", Str),
    f(2, "generateName", Str),
    f(3, "namespace", Str),
    f(4, "selfLink", Str),
    f(5, "uid", Str),
    f(6, "resourceVersion", Str),
    f(7, "generation", Int),
    f(8, "creationTimestamp", Time),
    f(9, "deletionTimestamp", Time),
    f(10, "deletionGracePeriodSeconds", Int),
    f(11, "labels", MapStr),
    f(12, "annotations", MapStr),
    r(13, "ownerReferences", Msg(OWNER_REFERENCE)),
    r(14, "finalizers", Str),
];
const OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Str),
    f(2, "namespace", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(5, "apiVersion", Str),
    f(6, "resourceVersion", Str),
    f(7, "fieldPath", Str),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[f(1, "name", Str)];
const LABEL_SELECTOR_REQUIREMENT: &[Field] =
    &[f(1, "key", Str), f(2, "operator", Str), r(3, "values", Str)];
const LABEL_SELECTOR: &[Field] = &[
    f(1, "matchLabels", MapStr),
    r(2, "matchExpressions", Msg(LABEL_SELECTOR_REQUIREMENT)),
];

const NAMESPACE: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(2, "spec", Msg(&[r(1, "finalizers", Str)])),
];
const SECRET: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(2, "data", MapBytes),
    f(3, "type", Str),
    f(4, "stringData", MapStr),
    f(5, "immutable", Bool),
];
const CONFIG_MAP: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(2, "data", MapStr),
    f(3, "binaryData", MapBytes),
    f(4, "immutable", Bool),
];
const SERVICE_ACCOUNT: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    r(2, "secrets", Msg(OBJECT_REFERENCE)),
    r(3, "imagePullSecrets", Msg(LOCAL_OBJECT_REFERENCE)),
    f(4, "automountServiceAccountToken", Bool),
];

const POLICY_RULE: &[Field] = &[
    r(1, "verbs", Str),
    r(2, "apiGroups", Str),
    r(3, "resources", Str),
    r(4, "resourceNames", Str),
    r(5, "nonResourceURLs", Str),
];
const ROLE: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    r(2, "rules", Msg(POLICY_RULE)),
];
const CLUSTER_ROLE: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    r(2, "rules", Msg(POLICY_RULE)),
    f(
        3,
        "aggregationRule",
        Msg(&[r(1, "clusterRoleSelectors", Msg(LABEL_SELECTOR))]),
    ),
];
const SUBJECT: &[Field] = &[
    f(1, "kind", Str),
    f(2, "apiGroup", Str),
    f(3, "name", Str),
    f(4, "namespace", Str),
];
const ROLE_REF: &[Field] = &[f(1, "apiGroup", Str), f(2, "kind", Str), f(3, "name", Str)];
const BINDING: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    r(2, "subjects", Msg(SUBJECT)),
    f(3, "roleRef", Msg(ROLE_REF)),
];

const RESOURCE_ATTRIBUTES: &[Field] = &[
    f(1, "namespace", Str),
    f(2, "verb", Str),
    f(3, "group", Str),
    f(4, "version", Str),
    f(5, "resource", Str),
    f(6, "subresource", Str),
    f(7, "name", Str),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[f(1, "path", Str), f(2, "verb", Str)];
const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(
        2,
        "spec",
        Msg(&[
            f(1, "resourceAttributes", Msg(RESOURCE_ATTRIBUTES)),
            f(2, "nonResourceAttributes", Msg(NON_RESOURCE_ATTRIBUTES)),
        ]),
    ),
];
const SELF_SUBJECT_RULES_REVIEW: &[Field] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(2, "spec", Msg(&[f(1, "namespace", Str)])),
];
const SELF_SUBJECT_REVIEW: &[Field] = &[f(1, "metadata", Msg(OBJECT_META))];

/// The message a kind's protobuf body holds, for the kinds that accept one.
fn message(kind: BuiltinKind) -> Option<&'static [Field]> {
    use BuiltinKind as B;
    Some(match kind {
        B::Namespace => NAMESPACE,
        B::Secret => SECRET,
        B::ConfigMap => CONFIG_MAP,
        B::ServiceAccount => SERVICE_ACCOUNT,
        B::Role => ROLE,
        B::ClusterRole => CLUSTER_ROLE,
        B::RoleBinding | B::ClusterRoleBinding => BINDING,
        B::SelfSubjectAccessReview => SELF_SUBJECT_ACCESS_REVIEW,
        B::SelfSubjectRulesReview => SELF_SUBJECT_RULES_REVIEW,
        B::SelfSubjectReview => SELF_SUBJECT_REVIEW,
        _ => return None,
    })
}

/// Whether the kind's protobuf bodies are understood.
pub fn accepts(kind: BuiltinKind) -> bool {
    message(kind).is_some()
}

/// A protobuf reader over one message's bytes.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.pos).ok_or("unexpected end of varint")?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint overflows 64 bits".into())
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = usize::try_from(self.varint()?).map_err(|e| e.to_string())?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.b.len())
            .ok_or("length-delimited field runs past the end")?;
        let out = &self.b[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn skip(&mut self, wire: u64) -> Result<(), String> {
        match wire {
            0 => self.varint().map(|_| ()),
            1 => self.advance(8),
            2 => self.bytes().map(|_| ()),
            5 => self.advance(4),
            w => Err(format!("unsupported wire type {w}")),
        }
    }

    fn advance(&mut self, n: usize) -> Result<(), String> {
        if self.pos + n > self.b.len() {
            return Err("fixed-width field runs past the end".into());
        }
        self.pos += n;
        Ok(())
    }

    fn done(&self) -> bool {
        self.pos >= self.b.len()
    }
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

/// A map entry message {key = 1, value = 2}.
fn entry(b: &[u8], value: Ty) -> Result<(String, Value), String> {
    let mut rd = Reader { b, pos: 0 };
    let (mut k, mut v) = (String::new(), None);
    while !rd.done() {
        let tag = rd.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => k = text(rd.bytes()?)?,
            (2, 2) => {
                let raw = rd.bytes()?;
                v = Some(match value {
                    MapBytes => json!(base64::engine::general_purpose::STANDARD.encode(raw)),
                    _ => json!(text(raw)?),
                });
            }
            (_, w) => rd.skip(w)?,
        }
    }
    Ok((k, v.unwrap_or_else(|| json!(""))))
}

fn time(b: &[u8]) -> Result<Value, String> {
    let mut rd = Reader { b, pos: 0 };
    let (mut secs, mut nanos) = (0i64, 0i64);
    while !rd.done() {
        let tag = rd.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 0) => secs = rd.varint()? as i64,
            (2, 0) => nanos = rd.varint()? as i64,
            (_, w) => rd.skip(w)?,
        }
    }
    let ts = jiff::Timestamp::new(secs, nanos as i32).map_err(|e| e.to_string())?;
    Ok(json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
}

fn decode_message(b: &[u8], fields: &[Field]) -> Result<Value, String> {
    let mut rd = Reader { b, pos: 0 };
    let mut out = Map::new();
    while !rd.done() {
        let tag = rd.varint()?;
        let (num, wire) = (tag >> 3, tag & 7);
        let Some(field) = fields.iter().find(|f| f.num == num) else {
            rd.skip(wire)?;
            continue;
        };
        let value = match (field.ty, wire) {
            (Str, 2) => json!(text(rd.bytes()?)?),
            (Int, 0) => json!(rd.varint()? as i64),
            (Bool, 0) => json!(rd.varint()? != 0),
            (Time, 2) => time(rd.bytes()?)?,
            (Msg(sub), 2) => decode_message(rd.bytes()?, sub)?,
            (MapStr | MapBytes, 2) => {
                let (k, v) = entry(rd.bytes()?, field.ty)?;
                let m = out
                    .entry(field.name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .ok_or("a map field was also given as something else")?;
                m.insert(k, v);
                continue;
            }
            (_, w) => {
                return Err(format!(
                    "field {} ({num}) has wire type {w}, which its type never has",
                    field.name
                ));
            }
        };
        // Go's encoder writes every scalar, zero or not; its JSON form omits them.
        let zero = matches!(&value, Value::String(s) if s.is_empty())
            || value == json!(0)
            || value == json!(false);
        if zero && !field.repeated {
            continue;
        }
        if field.repeated {
            out.entry(field.name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .ok_or("a repeated field was also given as something else")?
                .push(value);
        } else {
            out.insert(field.name.into(), value);
        }
    }
    Ok(Value::Object(out))
}

/// Decodes a protobuf body of `kind` into the object's JSON form, with `apiVersion` and `kind`
/// from its envelope.
pub fn decode(kind: BuiltinKind, body: &[u8]) -> Result<Value, String> {
    let fields = message(kind).ok_or("the kind takes no protobuf")?;
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the protobuf envelope's magic number")?;
    let mut rd = Reader { b: rest, pos: 0 };
    let (mut api_version, mut kind_name, mut raw) = (String::new(), String::new(), None);
    while !rd.done() {
        let tag = rd.varint()?;
        match (tag >> 3, tag & 7) {
            (1, 2) => {
                let tm =
                    decode_message(rd.bytes()?, &[f(1, "apiVersion", Str), f(2, "kind", Str)])?;
                api_version = tm["apiVersion"].as_str().unwrap_or("").to_string();
                kind_name = tm["kind"].as_str().unwrap_or("").to_string();
            }
            (2, 2) => raw = Some(rd.bytes()?),
            (_, w) => rd.skip(w)?,
        }
    }
    let mut obj = decode_message(raw.unwrap_or(&[]), fields)?;
    let o = obj.as_object_mut().expect("messages decode to objects");
    if !api_version.is_empty() {
        o.insert("apiVersion".into(), json!(api_version));
    }
    if !kind_name.is_empty() {
        o.insert("kind".into(), json!(kind_name));
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn field_bytes(num: u64, b: &[u8], out: &mut Vec<u8>) {
        varint((num << 3) | 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    #[test]
    fn a_secret_from_kubectl_create_secret() {
        let mut meta = vec![];
        field_bytes(1, b"cred", &mut meta);
        field_bytes(3, b"ns1", &mut meta);
        let mut label = vec![];
        field_bytes(1, b"a", &mut label);
        field_bytes(2, b"b", &mut label);
        field_bytes(11, &label, &mut meta);
        let mut data = vec![];
        field_bytes(1, b"kubeconfig", &mut data);
        field_bytes(2, b"hi", &mut data);
        let mut secret = vec![];
        field_bytes(1, &meta, &mut secret);
        field_bytes(2, &data, &mut secret);
        field_bytes(3, b"Opaque", &mut secret);
        let mut tm = vec![];
        field_bytes(1, b"v1", &mut tm);
        field_bytes(2, b"Secret", &mut tm);
        let mut body = MAGIC.to_vec();
        field_bytes(1, &tm, &mut body);
        field_bytes(2, &secret, &mut body);
        field_bytes(4, b"application/vnd.kubernetes.protobuf", &mut body);
        let v = decode(BuiltinKind::Secret, &body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "cred", "namespace": "ns1", "labels": {"a": "b"}},
                   "data": {"kubeconfig": "aGk="}})
        );
        assert!(decode(BuiltinKind::Secret, b"{}").is_err());
        assert!(decode(BuiltinKind::Secret, &body[..body.len() - 3]).is_err());
    }
}
