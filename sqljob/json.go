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
}

func (n *pathNode) kid(name []byte) *pathNode {
	if len(name) == 0 {
		for _, k := range n.kids {
			if k.name == "" {
				return k
			}
		}
		return nil
	}
	for _, k := range n.kids {
		// Length and first byte reject most names without a comparison.
		if len(k.name) == len(name) && k.name[0] == name[0] && k.name == string(name) {
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
	}
	return k.add(path[1:], next, nodes)
}

// scanner checks that a record is one JSON object and captures the values
// of the fields in its path tree in the same pass: the record is read
// once, nothing is allocated for a record whose strings have no escapes.
type scanner struct {
	d     []byte
	i     int
	depth int
	f     []val  // captured fields, by slot
	seen  []bool // the path's nodes met in this record, by id
	buf   []byte // unescaped strings of this record
}

var errNotObject = errors.New("the record is not a JSON object")

type syntaxError struct {
	at  int
	msg string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("not valid JSON: %s at byte %d", e.msg, e.at)
}

func (s *scanner) fail(msg string) error { return &syntaxError{at: s.i, msg: msg} }

// scan reads record d with root as the top of the path tree into s.f
// (which the caller cleared).
func (s *scanner) scan(d []byte, root *pathNode) error {
	s.d, s.i, s.depth, s.buf = d, 0, 0, s.buf[:0]
	clear(s.seen)
	s.space()
	if s.i >= len(s.d) || s.d[s.i] != '{' {
		if s.i < len(s.d) && s.valueStartOK() {
			return errNotObject
		}
		if s.i >= len(s.d) {
			return s.fail("empty record")
		}
		return s.fail(fmt.Sprintf("unexpected %s", quoteByte(s.d[s.i])))
	}
	if err := s.object(root); err != nil {
		return err
	}
	s.space()
	if s.i != len(s.d) {
		return s.fail("data after the object")
	}
	return nil
}

func (s *scanner) valueStartOK() bool {
	switch c := s.d[s.i]; {
	case c == '[' || c == '"' || c == 't' || c == 'f' || c == 'n' || c == '-' || (c >= '0' && c <= '9'):
		return true
	}
	return false
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (s *scanner) space() {
	if s.i >= len(s.d) || s.d[s.i] > ' ' { // compact JSON: nothing to skip
		return
	}
	i := s.i
	for i < len(s.d) && s.d[i] <= ' ' && (s.d[i] == ' ' || s.d[i] == '\t' || s.d[i] == '\n' || s.d[i] == '\r') {
		i++
	}
	s.i = i
}

// object reads an object at s.i ('{'); n (nil: nothing wanted inside) says
// which members to capture.
func (s *scanner) object(n *pathNode) error {
	s.depth++
	if s.depth > maxDepth {
		return s.fail(fmt.Sprintf("nested deeper than %d", maxDepth))
	}
	s.i++ // '{'
	s.space()
	if s.i < len(s.d) && s.d[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.space()
		if s.i >= len(s.d) || s.d[s.i] != '"' {
			return s.fail("expected a member name")
		}
		var kid *pathNode
		start := s.i
		esc, err := s.str()
		if err != nil {
			return err
		}
		if n != nil && len(n.kids) > 0 {
			name := s.d[start+1 : s.i-1]
			if esc {
				mark := len(s.buf)
				s.buf, err = unescape(s.buf, name)
				if err != nil {
					return err
				}
				name = s.buf[mark:]
				kid = n.kid(name)
				s.buf = s.buf[:mark]
			} else {
				kid = n.kid(name)
			}
			// A member on the query's path met twice is refused even
			// where the query reads inside it ({"c":{"id":1},"c":5}
			// for c->>'$.id'): readers differ on which one counts.
			if kid != nil {
				if s.seen[kid.id] {
					return &dupError{name: kid.name}
				}
				s.seen[kid.id] = true
			}
		}
		s.space()
		if s.i >= len(s.d) || s.d[s.i] != ':' {
			return s.fail("expected ':'")
		}
		s.i++
		s.space()
		if err := s.value(kid); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.d) {
			return s.fail("unterminated object")
		}
		switch s.d[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or '}'")
		}
	}
}

func (s *scanner) array() error {
	s.depth++
	if s.depth > maxDepth {
		return s.fail(fmt.Sprintf("nested deeper than %d", maxDepth))
	}
	s.i++ // '['
	s.space()
	if s.i < len(s.d) && s.d[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.space()
		if err := s.value(nil); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.d) {
			return s.fail("unterminated array")
		}
		switch s.d[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or ']'")
		}
	}
}

// value reads one value at s.i; n is its path node (nil: not wanted).
func (s *scanner) value(n *pathNode) error {
	if s.i >= len(s.d) {
		return s.fail("expected a value")
	}
	if n == nil || n.field < 0 {
		return s.skip(n)
	}
	start := s.i
	var v val
	switch c := s.d[s.i]; {
	case c == '{':
		if err := s.object(n); err != nil {
			return err
		}
		v = val{k: kJSON, s: s.d[start:s.i]}
	case c == '[':
		if err := s.array(); err != nil {
			return err
		}
		v = val{k: kJSON, s: s.d[start:s.i]}
	case c == '"':
		esc, err := s.str()
		if err != nil {
			return err
		}
		v = val{k: kStr, s: s.d[start+1 : s.i-1]}
		if esc && n != nil && n.field >= 0 {
			mark := len(s.buf)
			s.buf, err = unescape(s.buf, v.s)
			if err != nil {
				return err
			}
			v.s = s.buf[mark:len(s.buf):len(s.buf)]
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if err := s.number(); err != nil {
			return err
		}
		v = val{k: kNum, s: s.d[start:s.i]}
	case c == 't':
		if err := s.lit("true"); err != nil {
			return err
		}
		v = val{k: kBool, b: true}
	case c == 'f':
		if err := s.lit("false"); err != nil {
			return err
		}
		v = val{k: kBool}
	case c == 'n':
		if err := s.lit("null"); err != nil {
			return err
		}
		v = val{k: kNull}
	default:
		return s.fail(fmt.Sprintf("unexpected %s", quoteByte(c)))
	}
	if n != nil && n.field >= 0 {
		if s.f[n.field].present {
			return &dupError{name: n.name}
		}
		v.present = true
		s.f[n.field] = v
	}
	return nil
}

// skip reads a value that is not captured, checking it: the common case,
// kept apart so that it builds no val.
func (s *scanner) skip(n *pathNode) error {
	switch c := s.d[s.i]; {
	case c == '{':
		return s.object(n)
	case c == '[':
		return s.array()
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return s.fail(fmt.Sprintf("unexpected %s", quoteByte(s.d[s.i])))
}

// dupError: a member the query reads appears twice in one object. Which
// one a reader takes differs between JSON libraries and databases, so the
// record is refused rather than guessed at.
type dupError struct{ name string }

func (e *dupError) Error() string {
	return fmt.Sprintf("field %q appears twice in one object", reason.Clip(e.name, 64))
}

func (s *scanner) lit(word string) error {
	if len(s.d)-s.i < len(word) || string(s.d[s.i:s.i+len(word)]) != word {
		return s.fail("invalid literal")
	}
	s.i += len(word)
	return nil
}

func (s *scanner) number() error {
	d, i := s.d, s.i
	digits := func() bool {
		start := i
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
		return i > start
	}
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		digits()
	default:
		s.i = i
		return s.fail("invalid number")
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			s.i = i
			return s.fail("invalid number")
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			s.i = i
			return s.fail("invalid number")
		}
	}
	s.i = i
	return nil
}

// str reads a string literal at s.i ('"'), checking escapes and UTF-8, and
// says whether it holds escapes.
func (s *scanner) str() (esc bool, err error) {
	d, i := s.d, s.i+1 // a local index: the loops stay in registers
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
				s.i = i
				return esc, s.fail("unterminated string")
			}
		}
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			return esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(d) {
				s.i = i
				return esc, s.fail("unterminated string")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(d) || !isHex4(d[i+2:i+6]) {
					s.i = i
					return esc, s.fail("invalid \\u escape")
				}
				i += 6
			default:
				s.i = i
				return esc, s.fail("invalid escape")
			}
		case c < 0x20:
			s.i = i
			return esc, s.fail("control character in a string")
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				s.i = i
				return esc, &syntaxError{at: i, msg: fmt.Sprintf("byte 0x%02x is not UTF-8", c)}
			}
			i += size
		}
	}
}

// special8 marks (with its high bit) each byte of the eight in x that
// needs a look: '"', '\\', below 0x20, from 0x80 (the zero-byte test of
// "Bit Twiddling Hacks": a byte of x^y is zero exactly where x has y).
// Borrows can mark a byte above a marked one, never below: the lowest
// mark is exact.
func special8(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	return ((q-ones)&^q | (b-ones)&^b | (x-ones*0x20)&^x | x) & highs
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
