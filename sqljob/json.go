package sqljob

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/microbatch/microbatch/internal/event"
	"github.com/microbatch/microbatch/internal/reason"
)

// maxDepth bounds the nesting the scanner follows, so that a hostile
// record can't exhaust the stack.
const maxDepth = 512

// pathNode is one level of the fields a query reads: the member name that
// leads here, the field slot it fills (or -1), and the members read inside.
type pathNode struct {
	name  string
	field int
	id    int // the node's index in scanner.seen (the root has none)
	kids  []*pathNode
	// byFirst holds the kids by their name's first byte (an empty name
	// under 0), so that a member name is compared with the few kids
	// that start like it, mostly none.
	byFirst *[256][]*pathNode
}

func (n *pathNode) kid(name []byte) *pathNode {
	if n.byFirst == nil {
		return nil
	}
	var first byte
	if len(name) > 0 {
		first = name[0]
	}
	for _, k := range n.byFirst[first] {
		if k.name == string(name) {
			return k
		}
	}
	return nil
}

// add registers path under n and returns its field slot, reusing one
// registered before; nodes counts the nodes below the root.
func (n *pathNode) add(path []string, next, nodes *int) int {
	if len(path) == 0 {
		if n.field < 0 {
			n.field = *next
			*next++
		}
		return n.field
	}
	k := n.kid([]byte(path[0]))
	if k == nil {
		k = &pathNode{name: path[0], field: -1, id: *nodes}
		*nodes++
		n.kids = append(n.kids, k)
		if n.byFirst == nil {
			n.byFirst = new([256][]*pathNode)
		}
		var first byte
		if k.name != "" {
			first = k.name[0]
		}
		n.byFirst[first] = append(n.byFirst[first], k)
	}
	return k.add(path[1:], next, nodes)
}

// scanner checks that a record is one JSON object and captures the values
// of the fields in its path tree in the same pass: the record is read
// once, nothing is allocated for a record whose strings have no escapes.
type scanner struct {
	d     []byte
	f     []val   // captured fields, by slot
	seen  []bool  // the path's nodes met in this record, by id
	buf   []byte  // unescaped strings of this record
	stack []frame // the open objects and arrays, kept for the next record
}

var errNotObject = errors.New("the record is not a JSON object")

type syntaxError struct {
	at  int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("not valid JSON: %s at byte %d", e.msg, e.at)
}

// scan reads record d with root as the top of the path tree into s.f
// (which the caller cleared). One loop with an explicit stack, its index
// in a register: a call per value, not per token, is what makes a
// validating scan as fast as gjson.Valid while it captures.
func (s *scanner) scan(d []byte, root *pathNode) error {
	s.d, s.buf = d, s.buf[:0]
	clear(s.seen)
	stack := s.stack[:0]
	defer func() { s.stack = stack[:0] }()
	var (
		i    = skipSpace(d, 0)
		node *pathNode // the path node of the value at i (nil: not wanted)
		cur  = frame{node: root, start: i}
		err  error
	)
	if i >= len(d) || d[i] != '{' {
		switch {
		case i >= len(d):
			return failAt(i, "empty record")
		case valueStart(d[i]):
			return errNotObject
		}
		return failAt(i, fmt.Sprintf("unexpected %s", quoteByte(d[i])))
	}
	i++

objOpen:
	i = skipSpace(d, i)
	if i < len(d) && d[i] == '}' {
		i++
		goto closed
	}
member:
	i = skipSpace(d, i)
	if i >= len(d) || d[i] != '"' {
		return failAt(i, "expected a member name")
	}
	node = nil
	if cur.node == nil || len(cur.node.kids) == 0 {
		if i, _, err = scanString(d, i); err != nil {
			return err
		}
	} else if node, i, err = s.memberName(cur.node, i); err != nil {
		return err
	}
	i = skipSpace(d, i)
	if i >= len(d) || d[i] != ':' {
		return failAt(i, "expected ':'")
	}
	i = skipSpace(d, i+1)
	goto value

arrOpen:
	i = skipSpace(d, i)
	if i < len(d) && d[i] == ']' {
		i++
		goto closed
	}
element:
	i = skipSpace(d, i)
	node = nil

value:
	if i >= len(d) {
		return failAt(i, "expected a value")
	}
	switch c := d[i]; {
	case c == '{' || c == '[':
		if len(stack) >= maxDepth-1 {
			return failAt(i, fmt.Sprintf("nested deeper than %d", maxDepth))
		}
		stack = append(stack, cur)
		cur = frame{node: node, start: i, arr: c == '['}
		i++
		if c == '{' {
			goto objOpen
		}
		goto arrOpen
	case c == '"':
		start := i
		var esc bool
		if i, esc, err = scanString(d, i); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			if err = s.captureString(node, d[start+1:i-1], esc); err != nil {
				return err
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		start := i
		if i, err = scanNumber(d, i); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			if err = s.capture(node, val{k: kNum, s: d[start:i]}); err != nil {
				return err
			}
		}
	default:
		var v val
		switch {
		case c == 't' && hasWord(d, i, "true"):
			v, i = val{k: kBool, b: true}, i+4
		case c == 'f' && hasWord(d, i, "false"):
			v, i = val{k: kBool}, i+5
		case c == 'n' && hasWord(d, i, "null"):
			v, i = val{k: kNull}, i+4
		case c == 't' || c == 'f' || c == 'n':
			return failAt(i, "invalid literal")
		default:
			return failAt(i, fmt.Sprintf("unexpected %s", quoteByte(c)))
		}
		if node != nil && node.field >= 0 {
			if err = s.capture(node, v); err != nil {
				return err
			}
		}
	}

afterValue:
	i = skipSpace(d, i)
	if i >= len(d) {
		if cur.arr {
			return failAt(i, "unterminated array")
		}
		return failAt(i, "unterminated object")
	}
	switch d[i] {
	case ',':
		i++
		if cur.arr {
			goto element
		}
		goto member
	case '}':
		if !cur.arr {
			i++
			goto closed
		}
	case ']':
		if cur.arr {
			i++
			goto closed
		}
	}
	if cur.arr {
		return failAt(i, "expected ',' or ']'")
	}
	return failAt(i, "expected ',' or '}'")

closed:
	if cur.node != nil && cur.node.field >= 0 {
		if err = s.capture(cur.node, val{k: kJSON, s: d[cur.start:i]}); err != nil {
			return err
		}
	}
	if len(stack) == 0 { // the record's object
		if i = skipSpace(d, i); i != len(d) {
			return failAt(i, "data after the object")
		}
		return nil
	}
	cur, stack = stack[len(stack)-1], stack[:len(stack)-1]
	goto afterValue
}

// frame is an open object or array: its path node (nil: nothing wanted
// inside), where it starts, and which of the two it is.
type frame struct {
	node  *pathNode
	start int
	arr   bool
}

func failAt(i int, msg string) error { return &syntaxError{at: i, msg: msg} }

func valueStart(c byte) bool {
	return c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9')
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && d[i] <= ' ' && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

func hasWord(d []byte, i int, word string) bool {
	return len(d)-i >= len(word) && string(d[i:i+len(word)]) == word
}

// memberName reads the member name at i of an object whose path node n
// has kids, and returns the kid it names (nil: none) and the index after
// it. A member on the query's path met twice is refused even where the
// query reads inside it ({"c":{"id":1},"c":5} for c->>'$.id'): readers
// differ on which one counts.
func (s *scanner) memberName(n *pathNode, i int) (*pathNode, int, error) {
	start := i
	i, esc, err := scanString(s.d, i)
	if err != nil {
		return nil, i, err
	}
	name := s.d[start+1 : i-1]
	var kid *pathNode
	if esc {
		mark := len(s.buf)
		if s.buf, err = unescape(s.buf, name); err != nil {
			return nil, i, err
		}
		kid = n.kid(s.buf[mark:])
		s.buf = s.buf[:mark]
	} else {
		kid = n.kid(name)
	}
	if kid != nil {
		if s.seen[kid.id] {
			return nil, i, &dupError{name: kid.name}
		}
		s.seen[kid.id] = true
	}
	return kid, i, nil
}

// captureString keeps string content lit (escapes resolved) as n's value.
func (s *scanner) captureString(n *pathNode, lit []byte, esc bool) error {
	if esc {
		mark := len(s.buf)
		var err error
		if s.buf, err = unescape(s.buf, lit); err != nil {
			return err
		}
		lit = s.buf[mark:len(s.buf):len(s.buf)]
	}
	return s.capture(n, val{k: kStr, s: lit})
}

// capture keeps v as the value of n's field; a second value is refused.
func (s *scanner) capture(n *pathNode, v val) error {
	if s.f[n.field].present {
		return &dupError{name: n.name}
	}
	v.present = true
	s.f[n.field] = v
	return nil
}

// dupError: a member the query reads appears twice in one object. Which
// one a reader takes differs between JSON libraries and databases, so the
// record is refused rather than guessed at.
type dupError struct{ name string }

func (e *dupError) Error() string {
	return fmt.Sprintf("field %q appears twice in one object", reason.Clip(e.name, 64))
}

// scanNumber checks the JSON number at i and returns the index after it.
func scanNumber(d []byte, i int) (int, error) {
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = skipDigits(d, i)
	default:
		return i, failAt(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		start := i
		if i = skipDigits(d, i); i == start {
			return i, failAt(i, "invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		if i = skipDigits(d, i); i == start {
			return i, failAt(i, "invalid number")
		}
	}
	return i, nil
}

// skipDigits returns the index of the first byte from i that is not a
// decimal digit, looking at eight bytes at a time (epoch milliseconds
// have thirteen).
func skipDigits(d []byte, i int) int {
	for i+8 <= len(d) {
		if m := nonDigit8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
		i += 8
	}
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// nonDigit8 marks (with its high bit) each byte of the eight in x that is
// not '0'–'9': below '0', b-'0' borrows; above '9', b+0x46 reaches 0x80;
// from 0x80, b is marked itself. A borrow or carry can mark a byte above
// a marked one, never below: the lowest mark is exact.
func nonDigit8(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	return ((x - ones*'0') | (x + ones*0x46) | x) & highs
}

// scanString checks the string literal at i ('"'): escapes and UTF-8. It
// returns the index after its closing quote and whether it holds escapes.
func scanString(d []byte, i int) (int, bool, error) {
	esc := false
	i++
	for {
		// Skip plain bytes eight at a time; stop at the first byte that
		// needs a look.
		if i+8 <= len(d) {
			m := special8(binary.LittleEndian.Uint64(d[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(d) && d[i] != '"' && d[i] != '\\' && d[i] >= 0x20 && d[i] < utf8.RuneSelf {
				i++
			}
			if i >= len(d) {
				return i, esc, failAt(i, "unterminated string")
			}
		}
		switch c := d[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(d) {
				return i, esc, failAt(i, "unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex4(d[i+2:i+6]) {
					return i, esc, failAt(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, esc, failAt(i, "invalid escape")
			}
		case c < 0x20:
			return i, esc, failAt(i, "control character in a string")
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return i, esc, failAt(i, fmt.Sprintf("byte 0x%02x is not UTF-8", c))
			}
			i += size
		}
	}
}

// special8 marks (with its high bit) each byte of the eight in x that
// needs a look: '"', '\\', below 0x20, from 0x80. For an ASCII byte b,
// b-1 (of b^'"', b^'\\') and b-0x20 only reach the high bit when b is
// the byte looked for; every non-ASCII byte is marked by x itself. A
// borrow can mark a byte above a marked one, never below: the lowest
// mark is exact, and without a mark there is no borrow.
func special8(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"') // zero bytes where x has '"'
	b := x ^ (ones * '\\')
	return ((q - ones) | (b - ones) | (x - ones*0x20) | x) & highs
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// unescape appends the text of string literal content lit (escapes
// checked by str) to dst. A \u escape of a UTF-16 surrogate without its
// pair is refused: decoders turn every one into U+FFFD, so values that
// differ only there would merge into one group.
func unescape(dst, lit []byte) ([]byte, error) {
	for i := 0; i < len(lit); i++ {
		c := lit[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch lit[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := event.HexRune(lit[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				if i+6 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' && isHex4(lit[i+3:i+7]) {
					if p := utf16.DecodeRune(r, event.HexRune(lit[i+3:i+7])); p != utf8.RuneError {
						dst = utf8.AppendRune(dst, p)
						i += 6
						continue
					}
				}
				return dst, fmt.Errorf("a string holds \\u%04x, a UTF-16 surrogate without its pair, which is no character", r)
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, lit[i])
		}
	}
	return dst, nil
}
