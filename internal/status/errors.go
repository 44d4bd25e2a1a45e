package status

import "errors"

// ErrAddr means the listen address is malformed: fix the setting
// (host:port, or :port for loopback); retrying won't help.
var ErrAddr = errors.New("status: bad listen address")
