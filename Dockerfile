# syntax=docker/dockerfile:1
# nodekeeper in a container: built with the locked dependencies, run as a
# non-root user with the store on a volume.
#
#   docker build -t nodekeeper:0.1.0 .
#   docker run -v nodekeeper:/var/lib/nodekeeper -v ./config.yaml:/etc/nodekeeper/config.yaml:ro \
#       -p 8080:8080 nodekeeper:0.1.0
#
# The tag is the crate's version (cli/Cargo.toml), as the manifest names it;
# cli/tests/dist.rs keeps the three in step. The binary is built stripped,
# as scripts/release builds it.
#
# dist/kubernetes/nodekeeper.yaml runs this image as a StatefulSet.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# .git comes along so `nodekeeper version` names the commit.
COPY . .
RUN CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin nodekeeper \
    && install -m 0755 target/release/nodekeeper /usr/local/bin/nodekeeper

FROM debian:bookworm-slim
# ca-certificates: HTTPS inventories and EC2 are checked against the system's roots.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 65532 --user-group --home-dir /var/lib/nodekeeper --shell /usr/sbin/nologin nodekeeper \
    && install -d -o nodekeeper -g nodekeeper -m 0700 /var/lib/nodekeeper \
    && install -d -m 0755 /etc/nodekeeper
COPY --from=builder /usr/local/bin/nodekeeper /usr/local/bin/nodekeeper
USER 65532:65532
VOLUME ["/var/lib/nodekeeper"]
# The API, /metrics, /livez and /readyz (`listen:` in config.yaml).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/nodekeeper"]
CMD ["--db", "/var/lib/nodekeeper/data", "run", "--config", "/etc/nodekeeper/config.yaml"]
