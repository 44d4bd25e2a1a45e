package jsonscan

import (
	"errors"
	"fmt"
)

// SyntaxError says where and why a record is not valid JSON. It means bad
// input: refuse (dead-letter) the record, don't retry it.
type SyntaxError struct {
	At  int    // the byte offset where the scan stopped
	Msg string // what was wrong there
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("not valid JSON: %s at byte %d", e.Msg, e.At)
}

// ErrorAt returns a *SyntaxError for byte i.
func ErrorAt(i int, msg string) error { return &SyntaxError{At: i, Msg: msg} }

// errNeedStack: the nesting outgrew the stack skipNested was given; it
// starts again with one for MaxNesting levels. Never returned to callers.
var errNeedStack = errors.New("jsonscan: nesting outgrew the small stack")
