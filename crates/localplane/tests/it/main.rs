//! localplane's integration tests, in one binary: kube-rs and kubectl against real HTTP, the
//! Kubernetes semantics and Milo IPAM.

mod binary;
mod builtins;
mod cell;
mod common;
mod faults;
mod identity;
mod ipam_admission;
mod ipam_http;
mod ipam_kubectl;
mod ipam_release;
mod ipam_source;
mod kube_conformance;
mod kubectl;
mod lists;
mod localplane_only;
mod ownership;
mod proxy;
mod python;
mod servers;
mod world;
