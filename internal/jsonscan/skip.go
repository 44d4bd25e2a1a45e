package jsonscan

import "fmt"

// MaxNesting is encoding/json's nesting limit (its scanner's
// maxNestingDepth), the deepest limit SkipValue follows.
const MaxNesting = 10000

// SkipValue checks the JSON value at i, of any kind, and returns the index
// after it. depth is the number of objects and arrays open around it, and
// limit (at most MaxNesting) the most that may be open at once: an object
// or array that would be the limit+1-th is refused. Nothing is decoded
// and nothing allocated, but for the error of a value that is not valid.
func SkipValue(d []byte, i, depth, limit int) (int, error) {
	if i >= len(d) {
		return i, ErrorAt(i, "expected a value")
	}
	switch c := d[i]; {
	case c == '"':
		i, _, err := ScanString(d, i)
		return i, err
	case c == '-' || (c >= '0' && c <= '9'):
		return ScanNumber(d, i)
	case c == '{' || c == '[':
		limit = min(limit, MaxNesting)
		var small [2]uint64 // 128 levels: all but hostile records
		end, err := skipNested(d, i, depth, limit, small[:])
		if err == errNeedStack {
			return skipDeep(d, i, depth, limit)
		}
		return end, err
	}
	return ScanLiteral(d, i)
}

// skipDeep is skipNested with a stack for MaxNesting levels, in a frame of
// its own so that only a record that needs it pays for clearing it.
//
//go:noinline
func skipDeep(d []byte, i, depth, limit int) (int, error) {
	var stack [(MaxNesting + 63) / 64]uint64
	return skipNested(d, i, depth, limit, stack[:])
}

// skipNested checks the object or array at i. One loop with the open
// containers' kinds as bits of stack (1: array), not a call per value, is
// what makes it as fast as a validator can be. It returns errNeedStack if
// the containers it opens outnumber stack's bits.
func skipNested(d []byte, i, depth, limit int, stack []uint64) (int, error) {
	var (
		level int  // containers open in this call
		arr   bool // the innermost one is an array
		err   error
	)
open: // d[i] is '{' or '['
	if depth+level >= limit {
		return i, ErrorAt(i, fmt.Sprintf("nested deeper than %d", limit))
	}
	if level == len(stack)*64 {
		return i, errNeedStack
	}
	arr = d[i] == '['
	if arr {
		stack[level>>6] |= 1 << (level & 63)
	} else {
		stack[level>>6] &^= 1 << (level & 63)
	}
	level++
	i = SkipSpace(d, i+1)
	if arr {
		if i < len(d) && d[i] == ']' {
			i++
			goto closed
		}
		goto value
	}
	if i < len(d) && d[i] == '}' {
		i++
		goto closed
	}
member:
	if i >= len(d) || d[i] != '"' {
		return i, ErrorAt(i, "expected a member name")
	}
	if i, _, err = ScanString(d, i); err != nil {
		return i, err
	}
	if i = SkipSpace(d, i); i >= len(d) || d[i] != ':' {
		return i, ErrorAt(i, "expected ':'")
	}
	i = SkipSpace(d, i+1)
value:
	if i >= len(d) {
		return i, ErrorAt(i, "expected a value")
	}
	switch c := d[i]; {
	case c == '{' || c == '[':
		goto open
	case c == '"':
		i, _, err = ScanString(d, i)
	case c == '-' || (c >= '0' && c <= '9'):
		i, err = ScanNumber(d, i)
	default:
		i, err = ScanLiteral(d, i)
	}
	if err != nil {
		return i, err
	}
afterValue:
	if i = SkipSpace(d, i); i >= len(d) {
		if arr {
			return i, ErrorAt(i, "unterminated array")
		}
		return i, ErrorAt(i, "unterminated object")
	}
	switch d[i] {
	case ',':
		i = SkipSpace(d, i+1)
		if arr {
			goto value
		}
		goto member
	case '}':
		if !arr {
			i++
			goto closed
		}
	case ']':
		if arr {
			i++
			goto closed
		}
	}
	if arr {
		return i, ErrorAt(i, "expected ',' or ']'")
	}
	return i, ErrorAt(i, "expected ',' or '}'")
closed:
	if level--; level == 0 {
		return i, nil
	}
	arr = stack[(level-1)>>6]&(1<<((level-1)&63)) != 0
	goto afterValue
}
