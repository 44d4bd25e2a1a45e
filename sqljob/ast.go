package sqljob

import "strings"

// The parse tree of a SQL job's statement (parse.go): each node knows the
// byte offset it starts at, for the errors that refuse it.

// node is a parsed expression.
type node interface{ at() int }

type (
	// colRef is a name of one to three parts: kind, customer.id,
	// clicks.customer.id.
	colRef struct {
		p     int
		parts []string
	}
	// pathRef is field->>'$.path' (or ->, which is refused).
	pathRef struct {
		p     int
		col   *colRef
		op    string
		opPos int
		path  string
	}
	litNode struct {
		p int
		k litKind
		s string
	}
	unaryNode struct {
		p  int
		op string // "-", "+", "not", "!", "~"
		x  node
	}
	binaryNode struct {
		p     int
		op    string // lower case: "and", "=", "+", "div", …
		opPos int
		l, r  node
	}
	likeNode struct {
		p      int
		x, pat node
		not    bool
		escPos int // 0: no ESCAPE
	}
	inNode struct {
		p    int
		x    node
		not  bool
		list []node
	}
	betweenNode struct {
		p          int
		x, lo, hi  node
		not        bool
		betweenPos int
	}
	isNode struct {
		p     int
		x     node
		not   bool
		what  string // "null", "true", "false", "unknown"
		isPos int
	}
	callNode struct {
		p           int
		name        string // lower case
		star        bool   // COUNT(*)
		distinct    bool
		distinctPos int
		args        []node
	}
	caseNode struct {
		p       int
		subject node // nil: CASE WHEN cond …
		whens   []whenClause
		els     node
	}
	whenClause struct{ cond, val node }
	castNode   struct {
		p      int
		x      node
		typ    string // upper case: SIGNED, UNSIGNED, DECIMAL, CHAR, …
		typPos int
		args   []int // DECIMAL(p, s), CHAR(n)
	}
)

type litKind uint8

const (
	litStr litKind = iota
	litNum
	litTrue
	litFalse
	litNull
)

func (n *colRef) at() int      { return n.p }
func (n *pathRef) at() int     { return n.p }
func (n *litNode) at() int     { return n.p }
func (n *unaryNode) at() int   { return n.p }
func (n *binaryNode) at() int  { return n.p }
func (n *likeNode) at() int    { return n.p }
func (n *inNode) at() int      { return n.p }
func (n *betweenNode) at() int { return n.p }
func (n *isNode) at() int      { return n.p }
func (n *callNode) at() int    { return n.p }
func (n *caseNode) at() int    { return n.p }
func (n *castNode) at() int    { return n.p }

// reserved are MySQL's reserved words that a SQL job might meet where a
// name is expected: unquoted, MySQL refuses them as names, and so does
// this parser (quote them with backticks).
var reserved = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`accessible add all alter analyze and as asc asensitive before between bigint
	binary blob both by call cascade case change char character check collate column condition constraint
	continue convert create cross current_date current_time current_timestamp current_user cursor database
	databases day_hour day_microsecond day_minute day_second dec decimal declare default delayed delete desc
	describe deterministic distinct distinctrow div double drop dual each else elseif enclosed escaped except
	exists exit explain false fetch float float4 float8 for force foreign from fulltext function generated get
	grant group having high_priority hour_microsecond hour_minute hour_second if ignore in index infile inner
	inout insensitive insert int int1 int2 int3 int4 int8 integer intersect interval into is iterate join
	key keys kill lateral leading leave left like limit linear lines load localtime localtimestamp lock long
	longblob longtext loop low_priority match maxvalue mediumblob mediumint mediumtext middleint
	minute_microsecond minute_second mod modifies natural not no_write_to_binlog null numeric on optimize
	option optionally or order out outer outfile over partition precision primary procedure purge read reads
	read_write real recursive references regexp release rename repeat replace require resignal restrict return
	revoke right rlike schema schemas second_microsecond select sensitive separator set show signal smallint
	spatial specific sql sqlexception sqlstate sqlwarning sql_big_result sql_calc_found_rows sql_small_result
	ssl starting stored straight_join table terminated then tinyblob tinyint tinytext to trailing trigger
	true undo union unique unlock unsigned update usage use using utc_date utc_time utc_timestamp values
	varbinary varchar varcharacter varying virtual when where while window with write xor year_month zerofill`) {
		m[w] = true
	}
	return m
}()
