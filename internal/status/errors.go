package status

import "errors"

// ErrAddr means the listen address is malformed or can't be bound (in
// use, not this host's): fix the setting (host:port, or :port for
// loopback); retrying won't help.
var ErrAddr = errors.New("status: can't listen there")
