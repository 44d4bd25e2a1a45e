// Package testutil holds helpers shared by the tests of several packages:
// the goroutine-leak check, server discovery, a connection-cutting proxy,
// Kafka offset reads, fresh MySQL and PostgreSQL databases and the shell
// commands a Markdown document shows. It imports no package of this module
// but kafkautil, so that every package's own tests can use it. Imported only
// by tests.
package testutil
