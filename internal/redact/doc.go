// Package redact hides the passwords in connection strings (DSNs) before
// they reach a person: an error message, a log line, a status page, a
// results file. It owns the one rule for how a DSN is shown — scheme, user,
// host, path and parameters as given, only the password replaced by Mask —
// so that every package shows a DSN the same way. It does not parse DSNs
// for use and never decides whether one is valid.
package redact
