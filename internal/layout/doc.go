// Package layout has no code of its own: its test keeps the source tree the
// shape a new maintainer can walk into — files and functions short enough
// to read in one sitting, and every package's design text in its package
// doc, where `go doc` shows it.
package layout
