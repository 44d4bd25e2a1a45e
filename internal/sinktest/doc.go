// Package sinktest holds test helpers that need the writers or offsets (and
// so can't live in internal/testutil, which their own tests import).
package sinktest
