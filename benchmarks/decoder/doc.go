// Package decoder compares JSON parsers on the event decoder's workloads
// (benchmarks/README.md, "Decoder"). It is a module of its own so that the
// candidates the project did not pick stay out of the main module's
// dependencies; it measures, it ships nothing.
//
// Each candidate reads the four fields the way the strict decoder needs
// them (integers from their JSON text, the key as a string; names matched
// as encoding/json matches them where the library can) so the numbers
// compare the parsers, not skipped work.
package decoder
