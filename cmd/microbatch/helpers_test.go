package main_test

// The binary, commands and dev brokers come from package systemtest's
// harness, which the process-level tests there use too.

import (
	"os"
	"testing"

	"github.com/microbatch/microbatch/systemtest"
)

func TestMain(m *testing.M) { os.Exit(systemtest.Main(m)) }
