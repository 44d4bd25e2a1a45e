// Package docker holds the container stack of microbatch; it has no Go
// code, only the files and their tests:
//
//   - Dockerfile: the CLI as a static CGO_ENABLED=0 binary on
//     gcr.io/distroless/static-debian12:nonroot, running as a non-root
//     user; its build context is the repository root, trimmed by
//     .dockerignore.
//   - compose.yml: Apache Kafka (KRaft, one node), MySQL 8, Redis 7 and
//     microbatch built from the Dockerfile, for a real local stack;
//     development only (fixed credentials, no TLS).
//
// How to use it is in docs/docker.md.
//
// # Tests
//
// The tests (package docker_test) check the container stack without a Docker engine:
// the image's static build with the Dockerfile's own flags, its non-root
// final stage, and that docker/compose.yml, docs/docker.md ("Docker
// compose quickstart") and the CLI's flags agree with each other.
//
// What they cannot check is that the image builds and the stack starts: that
// needs Docker, which the test machines don't have.
package docker
