package writertest_test

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/microbatch/microbatch/internal/testutil"
)

// needServer returns the address in env (testutil.NeedServer: skipped
// without one, failed under CI or in the servers' test run).
func needServer(t *testing.T, env string) string {
	t.Helper()
	return testutil.NeedServer(t, env)
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9]+`)

// uniqueName is a job, topic or id name no other test or run uses: the
// test's name (shortened) and random hex, at most 60 bytes (an XA branch
// qualifier holds 64).
func uniqueName(t *testing.T) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := strings.Trim(nonName.ReplaceAllString(strings.TrimPrefix(t.Name(), "TestConformance"), "-"), "-")
	if len(name) > 45 {
		name = name[len(name)-45:]
	}
	return "wt-" + name + "-" + hex.EncodeToString(b)
}
