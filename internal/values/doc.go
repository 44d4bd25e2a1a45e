// Package values holds conversions of the loosely typed values a user's
// rows carry ([]any), shared by the writers and the strategies.
package values
