//! The committed CRD is what the data plane installs and what localplane serves; it must be
//! exactly what the types render, so a rule or message edited in one place only is caught here.

use egress_api::crd::{EGRESS_SHARD_CRD_PATH, egress_shard_crd, to_yaml};

#[test]
fn committed_crd_matches_the_types() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(EGRESS_SHARD_CRD_PATH);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let generated = to_yaml(&egress_shard_crd());
    assert!(
        committed == generated,
        "{} is out of date with crates/api; regenerate it with\n  cargo run -p egress-address-cli -- crd > {}",
        EGRESS_SHARD_CRD_PATH,
        EGRESS_SHARD_CRD_PATH
    );
}

#[test]
fn committed_crd_parses_back_to_the_same_object() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(EGRESS_SHARD_CRD_PATH);
    let committed = std::fs::read_to_string(&path).unwrap();
    let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_saphyr::from_str(&committed).expect("the committed CRD is valid YAML for a CRD");
    assert_eq!(parsed, egress_shard_crd());
}
