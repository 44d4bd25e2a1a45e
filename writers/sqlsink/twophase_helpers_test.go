package sqlsink

import (
	"testing"
)

// Helpers of the two-phase (XA) tests.

func twoPhaseOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
