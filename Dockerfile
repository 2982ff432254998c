# The egress-address-controller image: one fully static binary, run as a non-root user (65532) from
# an image that holds nothing else. Built for linux/amd64 and linux/arm64 by cross-compiling on the
# build machine's own platform, never by emulating the target:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t egress-address-controller:dev \
#     --build-arg EGRESS_ADDRESS_COMMIT="$(git rev-parse --short HEAD)" .
#
# The build copies no .git, so the commit that --version and egress_address_build_info name comes
# from the build argument (`unknown` without it).
#
# Both base images are pinned by the digest of their multi-platform index, so the builder stage
# resolves to the build machine's platform and the final stage to each target's. The digests were
# taken from public Dockerfiles that pin the same tags (rust:1.95.0-slim-bookworm, distroless
# static-debian12:nonroot as of 2026-08); no registry can be reached from where this file was
# written, so they were not verified against the registry itself. Before relying on them, check
# with `docker buildx imagetools inspect <image>:<tag>` and move tag and digest together.

FROM --platform=$BUILDPLATFORM rust:1.95.0-slim-bookworm@sha256:d7482085ff5b415f84dba5647ae71606650bdef00db7aeb69f4b3d170c3e4082 AS build
# Set by BuildKit for each platform of --platform: amd64 or arm64.
ARG TARGETARCH
# The same script CI runs to build and check the static binary for its own architecture.
COPY .ci/build-static-controller /usr/local/bin/build-static-controller
# The target's C cross compiler, its static C library and the Rust target; a layer per target
# architecture, before the sources, so a source change does not repeat it.
RUN build-static-controller setup "$TARGETARCH"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
ARG EGRESS_ADDRESS_COMMIT=unknown
RUN build-static-controller build "$TARGETARCH" release /out

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/egress-address-controller /egress-address-controller
USER 65532:65532
ENTRYPOINT ["/egress-address-controller"]
