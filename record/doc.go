// Package record holds the few types the driver (package batch and the
// strategies) and the sinks (package writers and its sink packages) both
// speak: a batch's offset range of one partition and a record that could
// not be processed. It imports nothing of the project, so both sides can
// import it, as franz-go's clients and tools share kmsg.
package record
