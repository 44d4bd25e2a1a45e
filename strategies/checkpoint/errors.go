package checkpoint

import "github.com/microbatch/microbatch/strategies/internal/shared"

// ErrConfig means the configuration is invalid (or a Transform made rows
// that can't be written); the message names the setting. Fix it and start
// again: no restart cures it. It is strategies.ErrConfig too.
var ErrConfig = shared.ErrConfig

// ErrUnreachable means a server failed for longer than the outage
// timeout; the message names it (strategies.ErrUnreachable).
var ErrUnreachable = shared.ErrUnreachable

// OutageChange is a server lost or back (Config.OnOutage).
type OutageChange = shared.OutageChange

// fatal marks an error that a restart can't cure.
type fatal struct{ err error }

func (f fatal) Error() string { return f.err.Error() }
func (f fatal) Unwrap() error { return f.err }
