package strategies

import "errors"

var (
	// ErrConfig means the configuration is invalid; the message names the
	// setting. Fix it and start again.
	ErrConfig = errors.New("strategies: invalid configuration")
)
