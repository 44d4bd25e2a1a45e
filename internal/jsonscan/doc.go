// Package jsonscan owns the pieces of a one-pass, allocation-free JSON
// validator (RFC 8259, as strict as encoding/json: escapes, control
// characters, the number grammar, UTF-8 inside strings, a nesting limit)
// that the record readers share: the SQL jobs' scanner (sqljob), which
// captures the fields a query reads while it validates, and the built-in
// job's event decoder (internal/event), which captures its four fields.
//
// It does not decide which members a reader wants, nor what a duplicated
// member means: the readers walk the objects they capture from and hand
// every other value to SkipValue, so the record is read once.
package jsonscan
