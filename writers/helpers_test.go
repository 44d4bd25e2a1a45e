package writers

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"regexp"
	"testing"
)

// Helpers of the Redis tests in this package (writers/sqlsink's tests have
// their own): a job name unique per run, the built-in totals of a key, and
// an exact sum as the decimal string a sink stores beyond int64.

var nonJobChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func uniqueJob(t *testing.T) string {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	name := nonJobChars.ReplaceAllString(t.Name(), "_")
	if len(name) > 100 {
		name = name[len(name)-100:]
	}
	return fmt.Sprintf("%s-%x", name, n)
}

type total struct{ events, amount int64 }

func bigSum(vs ...int64) string {
	s := new(big.Int)
	for _, v := range vs {
		s.Add(s, big.NewInt(v))
	}
	return s.String()
}
