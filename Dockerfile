# Builds the egress-address-controller as a static binary and runs it as a non-root user from an
# image that holds nothing else.
#
#   docker build -t egress-address-controller:dev \
#     --build-arg EGRESS_ADDRESS_COMMIT="$(git rev-parse --short HEAD)" .
#
# The build copies no .git, so the commit that --version and egress_address_build_info name comes
# from the build argument (`unknown` without it).

FROM rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
ARG EGRESS_ADDRESS_COMMIT=unknown
# Alpine's toolchain targets musl, so the result is statically linked.
RUN cargo build --release --locked -p egress-address --bin egress-address-controller \
 && cp target/release/egress-address-controller /egress-address-controller

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /egress-address-controller /egress-address-controller
USER 65532:65532
ENTRYPOINT ["/egress-address-controller"]
