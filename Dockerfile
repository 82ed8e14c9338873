# syntax=docker/dockerfile:1
# The idemgate image: the `idemgate` binary on Debian 12 (glibc, CA certificates), run as an
# unprivileged user. How to run it: docs/operations.md, "The container image".
#
#   docker build -t idemgate .          (or: podman build -t idemgate .)
#   docker run --rm -p 8080:8080 --stop-timeout 90 \
#     -v ./idemgate.toml:/etc/idemgate/idemgate.toml:ro -v idemgate-data:/var/lib/idemgate idemgate
#
# The base images are build arguments, so a mirror or a pinned digest can be given:
#   --build-arg RUST_IMAGE=registry.example.com/rust:1.95-slim-bookworm
#   --build-arg RUNTIME_IMAGE=debian:bookworm-slim@sha256:...
# The binary links glibc dynamically: the runtime image's glibc must be at least the builder's
# (both Debian 12 by default).
ARG RUST_IMAGE=rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
# The registry and the target directory are cache mounts: a rebuild after a source change
# compiles the workspace's own crates only. Built without the release profile's DWARF line
# tables (nine tenths of the binary's size, and compile time): its symbols stay, so a backtrace
# still names each function.
RUN --mount=type=cache,id=idemgate-cargo-registry,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,id=idemgate-target,target=/src/target,sharing=locked \
    CARGO_PROFILE_RELEASE_DEBUG=false cargo build --release --locked -p idemgate-cli \
 && cp target/release/idemgate /usr/local/bin/idemgate \
 && /usr/local/bin/idemgate --version

FROM ${RUNTIME_IMAGE}
RUN groupadd --system --gid 10001 idemgate \
 && useradd --system --uid 10001 --gid idemgate --home-dir /var/lib/idemgate \
        --no-create-home --shell /usr/sbin/nologin idemgate \
 && mkdir -p /etc/idemgate /var/lib/idemgate \
 && chown idemgate:idemgate /var/lib/idemgate \
 && chmod 0750 /var/lib/idemgate
# The authorities https:// downstreams, rediss:// and PostgreSQL's verify-full are checked
# against (the builder's Debian ca-certificates bundle; a file the config names adds its own).
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=builder /usr/local/bin/idemgate /usr/local/bin/idemgate
COPY deploy/container-healthcheck /usr/local/bin/idemgate-healthcheck

# The config is a mounted file; any key may be overridden by IDEMGATE_* variables
# (IDEMGATE_STORE__URL=..., see idemgate.example.toml). IDEMGATE_LISTEN overrides the file's
# `listen`: in a container the gateway listens on every address. The SQLite store's default
# path, ./idemgate-data, is inside the data volume (or set path = "/var/lib/idemgate").
ENV IDEMGATE_CONFIG=/etc/idemgate/idemgate.toml \
    IDEMGATE_LISTEN=0.0.0.0:8080 \
    IDEMGATE_LOG=info
WORKDIR /var/lib/idemgate
VOLUME ["/var/lib/idemgate"]
USER 10001:10001
EXPOSE 8080
# SIGTERM: the gateway stops accepting, lets requests finish within limits.shutdown_grace and
# forwards settle, then exits 0. Give it time: --stop-timeout 90 (compose: stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/idemgate-healthcheck"]
ENTRYPOINT ["/usr/local/bin/idemgate"]
CMD ["serve"]
