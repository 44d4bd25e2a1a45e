package sqljob

import (
	"errors"
	"fmt"

	"github.com/microbatch/microbatch/internal/jsonscan"
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

func failAt(i int, msg string) error { return jsonscan.ErrorAt(i, msg) }

// scan reads record d with root as the top of the path tree into s.f
// (which the caller cleared). One loop with an explicit stack walks the
// objects on the query's path, its index in a register; every other
// object or array is checked whole by jsonscan.SkipValue, the validator
// the built-in job's decoder uses too. A call per value, not per token, is
// what makes a validating scan as fast as gjson.Valid while it captures.
func (s *scanner) scan(d []byte, root *pathNode) error {
	s.d, s.buf = d, s.buf[:0]
	clear(s.seen)
	stack := s.stack[:0]
	defer func() { s.stack = stack[:0] }()
	var (
		i    = jsonscan.SkipSpace(d, 0)
		node *pathNode // the path node of the value at i (nil: not wanted)
		cur  = frame{node: root, start: i}
		err  error
	)
	if i >= len(d) || d[i] != '{' {
		switch {
		case i >= len(d):
			return failAt(i, "empty record")
		case jsonscan.ValueStart(d[i]):
			return errNotObject
		}
		return failAt(i, fmt.Sprintf("unexpected %s", jsonscan.QuoteByte(d[i])))
	}
	i++

objOpen:
	i = jsonscan.SkipSpace(d, i)
	if i < len(d) && d[i] == '}' {
		i++
		goto closed
	}
member:
	i = jsonscan.SkipSpace(d, i)
	if i >= len(d) || d[i] != '"' {
		return failAt(i, "expected a member name")
	}
	node = nil
	if cur.node == nil || len(cur.node.kids) == 0 {
		if i, _, err = jsonscan.ScanString(d, i); err != nil {
			return err
		}
	} else if node, i, err = s.memberName(cur.node, i); err != nil {
		return err
	}
	i = jsonscan.SkipSpace(d, i)
	if i >= len(d) || d[i] != ':' {
		return failAt(i, "expected ':'")
	}
	i = jsonscan.SkipSpace(d, i+1)

	// The member's value.
	if i >= len(d) {
		return failAt(i, "expected a value")
	}
	switch c := d[i]; {
	case c == '[' || c == '{' && (node == nil || len(node.kids) == 0):
		// Nothing is read inside (the path names members, not elements):
		// check it whole, capture it as text.
		start := i
		if i, err = jsonscan.SkipValue(d, i, len(stack)+1, maxDepth); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			if err = s.capture(node, val{k: kJSON, s: d[start:i]}); err != nil {
				return err
			}
		}
	case c == '{':
		if len(stack) >= maxDepth-1 {
			return failAt(i, fmt.Sprintf("nested deeper than %d", maxDepth))
		}
		stack = append(stack, cur)
		cur = frame{node: node, start: i}
		i++
		goto objOpen
	case c == '"':
		start := i
		var esc bool
		if i, esc, err = jsonscan.ScanString(d, i); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			if err = s.captureString(node, d[start+1:i-1], esc); err != nil {
				return err
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		start := i
		if i, err = jsonscan.ScanNumber(d, i); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			if err = s.capture(node, val{k: kNum, s: d[start:i]}); err != nil {
				return err
			}
		}
	default:
		if i, err = jsonscan.ScanLiteral(d, i); err != nil {
			return err
		}
		if node != nil && node.field >= 0 {
			v := val{k: kNull}
			if c != 'n' {
				v = val{k: kBool, b: c == 't'}
			}
			if err = s.capture(node, v); err != nil {
				return err
			}
		}
	}

afterValue:
	i = jsonscan.SkipSpace(d, i)
	if i >= len(d) {
		return failAt(i, "unterminated object")
	}
	switch d[i] {
	case ',':
		i++
		goto member
	case '}':
		i++
		goto closed
	}
	return failAt(i, "expected ',' or '}'")

closed:
	if cur.node != nil && cur.node.field >= 0 {
		if err = s.capture(cur.node, val{k: kJSON, s: d[cur.start:i]}); err != nil {
			return err
		}
	}
	if len(stack) == 0 { // the record's object
		if i = jsonscan.SkipSpace(d, i); i != len(d) {
			return failAt(i, "data after the object")
		}
		return nil
	}
	cur, stack = stack[len(stack)-1], stack[:len(stack)-1]
	goto afterValue
}

// frame is an open object on the query's path: its path node (the root's
// may have no kids) and where it starts.
type frame struct {
	node  *pathNode
	start int
}

// memberName reads the member name at i of an object whose path node n
// has kids, and returns the kid it names (nil: none) and the index after
// it. A member on the query's path met twice is refused even where the
// query reads inside it ({"c":{"id":1},"c":5} for c->>'$.id'): readers
// differ on which one counts.
func (s *scanner) memberName(n *pathNode, i int) (*pathNode, int, error) {
	start := i
	i, esc, err := jsonscan.ScanString(s.d, i)
	if err != nil {
		return nil, i, err
	}
	name := s.d[start+1 : i-1]
	var kid *pathNode
	if esc {
		mark := len(s.buf)
		if s.buf, err = jsonscan.Unescape(s.buf, name); err != nil {
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
		if s.buf, err = jsonscan.Unescape(s.buf, lit); err != nil {
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
