# approvald's container image: a static binary on a distroless base, run as a non-root user.
#
#   docker build -t approvald --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run -p 8080:8080 -v approvald:/var/lib/approvald approvald
#
# The image serves on 0.0.0.0:8080 with SQLite in the /var/lib/approvald volume; set
# APPROVALD_DATABASE_URL=postgres://... for PostgreSQL (deploy/compose.yaml runs two replicas
# on one database). docs/operations.md, "Packaging", says more.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
# CGO_ENABLED=0: both stores are pure Go (modernc.org/sqlite, pgx), so the binary is static.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.buildVersion=${VERSION} -X main.buildCommit=${COMMIT}" \
      -o /out/approvald ./cmd/approvald \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/approvald /usr/local/bin/approvald
# The database directory belongs to the nonroot user (65532); the store creates its files 0600.
COPY --from=build --chown=65532:65532 /out/data /var/lib/approvald
USER 65532:65532
ENV APPROVALD_LISTEN=0.0.0.0:8080 \
    APPROVALD_DATABASE_URL=file:/var/lib/approvald/approvald.db
VOLUME /var/lib/approvald
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=6s --start-period=20s --retries=3 \
  CMD ["/usr/local/bin/approvald", "health"]
ENTRYPOINT ["/usr/local/bin/approvald"]
CMD ["serve"]
