package main

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/strategies"
	"github.com/microbatch/microbatch/writers"
)

// Exit codes (documented in docs/operations.md, "Exit codes").
const (
	exitOK       = 0
	exitFailure  = 1 // the run failed, or verify found a difference
	exitConfig   = 2 // bad flags, config file or values
	exitNoServer = 3 // Kafka or the sink did not answer within --connect-timeout
	exitNoTopic  = 4 // the topic to read does not exist
	exitDenied   = 5 // a server refused the credentials or a permission
	exitSignaled = 130
)

// configError marks errors that mean "fix your configuration" (exit 2).
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }

func badConfig(format string, args ...any) error {
	return configError{fmt.Errorf(format, args...)}
}

// isConfigError reports an error that means "fix your configuration": the
// CLI's own, and the library's (a setting strategies refuses, a DSN that
// does not parse).
func isConfigError(err error) bool {
	var ce configError
	return errors.As(err, &ce) || errors.Is(err, strategies.ErrConfig) || errors.Is(err, writers.ErrBadDSN)
}

// settings reads one command's flags with viper's precedence: a flag given
// on the command line, then MICROBATCH_<NAME> (dashes become underscores),
// then the YAML file named by --config (shared by every command, see
// readConfigFile), then the flag's default. Values are parsed strictly: a
// malformed number or duration is an error, not zero.
type settings struct {
	v        *viper.Viper
	fs       *pflag.FlagSet
	file     string         // the --config file, if any
	fromFile map[string]any // the keys of this command the file set
}

func loadSettings(cmd *cobra.Command) (*settings, error) {
	v := viper.New()
	v.SetEnvPrefix("MICROBATCH")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, badConfig("binding flags: %v", err)
	}
	s := &settings{v: v, fs: cmd.Flags()}
	if s.file = v.GetString("config"); s.file != "" {
		values, err := readConfigFile(cmd, s.file)
		if err != nil {
			return nil, err
		}
		if err := v.MergeConfigMap(values); err != nil {
			return nil, badConfig("config file %s: %v", s.file, err)
		}
		s.fromFile = values
	}
	return s, nil
}

// str reads a setting as text; a command-line-only flag is read from the
// command line alone.
func (s *settings) str(name string) string {
	if f := s.fs.Lookup(name); f != nil && isCommandLineOnly(f) {
		return strings.TrimSpace(f.Value.String())
	}
	return strings.TrimSpace(s.v.GetString(name))
}

// label is setting name as a message about its value names it: with the
// MICROBATCH_* variable or the config file the value came from (viper's
// precedence: flag, variable, file), so that a bad value is found where it
// was written, as an unknown key in the file is.
func (s *settings) label(name string) string {
	f := s.fs.Lookup(name)
	switch {
	case s.fs.Changed(name) || f != nil && isCommandLineOnly(f):
		return name
	case os.Getenv(envName(name)) != "": // viper skips an empty variable
		return name + " (" + envName(name) + ")"
	}
	if _, ok := s.fromFile[name]; ok {
		return "config file " + s.file + ": " + name
	}
	return name
}

// brokers reads the Kafka bootstrap brokers. given says whether brokers
// was set anywhere: on the command line, in MICROBATCH_BROKERS (even set
// empty) or in the config file. Set but naming no broker is a
// configuration error, so that a command that starts a broker of its own
// only when none is given (run's embedded demo broker, bench's dev broker)
// never does so because a value the user gave turned out empty — the demo
// would write its events into the user's sink.
func (s *settings) brokers() (brokers []string, given bool, err error) {
	var where []string
	if s.fs.Changed("brokers") {
		where = append(where, "--brokers")
	}
	if _, ok := os.LookupEnv("MICROBATCH_BROKERS"); ok {
		where = append(where, "MICROBATCH_BROKERS")
	}
	if _, ok := s.fromFile["brokers"]; ok {
		where = append(where, "config file "+s.file)
	}
	brokers = kafkautil.SplitBrokers(s.str("brokers"))
	if len(where) > 0 && len(brokers) == 0 {
		return nil, true, badConfig("brokers: set (%s) but names no broker; the embedded broker runs only when brokers is set nowhere (flag, environment, config file)",
			strings.Join(where, ", "))
	}
	return brokers, len(where) > 0, nil
}

func (s *settings) duration(name string) (time.Duration, error) {
	raw := s.str(name)
	d, err := time.ParseDuration(raw)
	if err != nil {
		return 0, badConfig("%s: %q is not a duration (e.g. 500ms, 2s, 1m)", s.label(name), raw)
	}
	if d < 0 {
		return 0, badConfig("%s: %s is negative", s.label(name), raw)
	}
	return d, nil
}

func (s *settings) boolean(name string) (bool, error) {
	raw := s.str(name)
	b, err := strconv.ParseBool(raw)
	if err != nil {
		return false, badConfig("%s: %q is not true or false", s.label(name), raw)
	}
	return b, nil
}

func (s *settings) int64(name string) (int64, error) {
	raw := s.str(name)
	n, err := strconv.ParseInt(strings.ReplaceAll(raw, "_", ""), 10, 64)
	if err != nil {
		return 0, badConfig("%s: %q is not a whole number", s.label(name), raw)
	}
	if n < 0 {
		return 0, badConfig("%s: %d is negative", s.label(name), n)
	}
	return n, nil
}

// bigInt reads an integer of any size and sign.
func (s *settings) bigInt(name string) (*big.Int, error) {
	raw := s.str(name)
	n, ok := new(big.Int).SetString(strings.ReplaceAll(raw, "_", ""), 10)
	if !ok {
		return nil, badConfig("%s: %q is not a whole number", s.label(name), raw)
	}
	return n, nil
}

func (s *settings) uint64(name string) (uint64, error) {
	raw := s.str(name)
	n, err := strconv.ParseUint(strings.ReplaceAll(raw, "_", ""), 10, 64)
	if err != nil {
		return 0, badConfig("%s: %q is not a non-negative whole number", s.label(name), raw)
	}
	return n, nil
}

// list reads a list setting given as repeated flags, a comma list, or an
// env var / config value with commas (viper splits env lists on spaces).
func (s *settings) list(name string) []string {
	items := s.v.GetStringSlice(name)
	if f := s.fs.Lookup(name); f != nil && isCommandLineOnly(f) {
		items = []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			items = sv.GetSlice()
		}
	}
	var out []string
	for _, item := range items {
		for _, part := range strings.Split(item, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// partitions reads a partition count, 1..10000.
func (s *settings) partitions(name string) (int32, error) {
	n, err := s.int64(name)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > 10000 {
		return 0, badConfig("%s: %d is outside 1..10000", s.label(name), n)
	}
	return int32(n), nil
}

func (s *settings) float(name string) (float64, error) {
	raw := s.str(name)
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil || f < 0 {
		return 0, badConfig("%s: %q is not a non-negative number", s.label(name), raw)
	}
	return f, nil
}

func (s *settings) oneOf(name string, allowed ...string) (string, error) {
	v := s.str(name)
	if !slices.Contains(allowed, v) {
		return "", badConfig("%s: %q is not one of %s", s.label(name), v, strings.Join(allowed, ", "))
	}
	return v, nil
}

// choice reads a setting that must be one of allowed, typed as they are.
func choice[T ~string](s *settings, name string, allowed ...T) (T, error) {
	v, err := s.oneOf(name, names(allowed)...)
	return T(v), err
}

// names is a list of typed names as text, for help and messages.
func names[T ~string](vals []T) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out
}

// addConnectTimeoutFlag adds --connect-timeout to a command that talks to
// Kafka or a sink (run has its own, with the same meaning).
func addConnectTimeoutFlag(fs *pflag.FlagSet) {
	fs.Duration("connect-timeout", strategies.DefaultConnectTimeout, "how long to wait for Kafka and the sink to answer (exit 3 after)")
}

// addConfigFlag adds --config to a command.
func addConfigFlag(fs *pflag.FlagSet) {
	fs.String("config", "", "YAML file with settings, one file for every command (keys are the flag names; a key only other commands have is ignored); env MICROBATCH_CONFIG")
}
