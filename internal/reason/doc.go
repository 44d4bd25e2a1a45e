// Package reason makes the text of a dead letter's reason safe to store.
// A reason may quote bad input (a decoder's "got …", a user's error text),
// so it may hold bytes that are not UTF-8; every sink stores it as text (a
// utf8mb4 VARCHAR on MySQL/MariaDB, a JSON string in Redis, Kafka and
// files), where such bytes are refused or mangled (MariaDB error 1366;
// JSON encoders write U+FFFD). Safe is the one place that turns any text
// into a storable reason; the payload, kept as bytes, is what stays exact.
//
// It does not know about sinks or their widths: callers pass the bound.
package reason
