//! The cell looks like a cell: `kube-system` exists from the start, and its uid, the cell's
//! identity, is random per localplane and stays for the plane's life.

use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

use crate::common::{ADMIN, api_err, builder, serve};

#[tokio::test]
async fn the_cell_has_a_kube_system_namespace_whose_uid_is_its_identity() {
    let a = serve(builder()).await;
    let b = serve(builder()).await;
    let nss: Api<Namespace> = Api::all(a.http_client("cell", ADMIN).unwrap());
    let ks = nss.get("kube-system").await.unwrap();
    assert_eq!(ks.uid().as_deref(), Some(a.cell_uid().as_str()));
    assert_eq!(a.cell_uid().len(), 36, "a UUID: {}", a.cell_uid());
    assert_ne!(a.cell_uid(), b.cell_uid(), "every cell is another cell");

    for name in ["kube-system", "default"] {
        let e = api_err(
            nss.delete(name, &DeleteParams::default())
                .await
                .unwrap_err(),
        );
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"), "{name}");
        assert_eq!(
            e.message,
            format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted")
        );
    }
    assert_eq!(
        nss.get("kube-system").await.unwrap().uid(),
        Some(a.cell_uid()),
        "the identity outlives an attempt to delete it"
    );

    let project: Api<Namespace> = Api::all(a.http_client("p1", ADMIN).unwrap());
    assert!(
        project.get_opt("kube-system").await.unwrap().is_none(),
        "a Milo project plane is not a cell"
    );
    a.shutdown().await;
    b.shutdown().await;
}
