// Package benchmarks measures what each delivery strategy costs, as ratios
// against baselines measured in the same run on the same data (raw sarama
// consume). Results and how to reproduce them are in benchmarks/README.md.
package benchmarks
