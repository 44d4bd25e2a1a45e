package decoder

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/bytedance/sonic"
	goccy "github.com/goccy/go-json"
	"github.com/tidwall/gjson"
	"github.com/valyala/fastjson"

	"github.com/microbatch/microbatch/internal/event"
)

// A Candidate decodes one record into ev, or says why not.
type Candidate struct {
	Name   string
	Decode func(data []byte, ev *event.Event) error
}

// Candidates returns the parsers compared, each with its own state (a
// fastjson Parser is reused, as a partition's decoder would reuse it).
func Candidates() []Candidate {
	var fj fastjsonDecoder
	return []Candidate{
		{"microbatch_Decode", event.Decode},
		{"encoding_json", rawDecode(json.Unmarshal)},
		{"gjson", decodeGJSON},
		{"fastjson", fj.decode},
		{"goccy_go_json", rawDecode(goccy.Unmarshal)},
		{"sonic_std", rawDecode(sonic.ConfigStd.Unmarshal)},
	}
}

var errRefused = errors.New("refused")

// fields is how the struct-decoding libraries read the event: raw field
// values, checked the way the strict decoder checks them.
type fields struct {
	ID     json.RawMessage `json:"id"`
	Key    json.RawMessage `json:"key"`
	Amount json.RawMessage `json:"amount"`
	TS     json.RawMessage `json:"ts"`
}

func rawDecode(unmarshal func([]byte, any) error) func([]byte, *event.Event) error {
	return func(data []byte, ev *event.Event) error {
		if !utf8.Valid(data) {
			return errRefused
		}
		var f fields
		if err := unmarshal(data, &f); err != nil {
			return err
		}
		var err error
		if ev.ID, err = strconv.ParseInt(string(f.ID), 10, 64); err != nil {
			return err
		}
		if ev.Amount, err = strconv.ParseInt(string(f.Amount), 10, 64); err != nil {
			return err
		}
		if ev.TS, err = strconv.ParseInt(string(f.TS), 10, 64); err != nil {
			return err
		}
		var key string
		if len(f.Key) == 0 || f.Key[0] != '"' || unmarshal(f.Key, &key) != nil {
			return errRefused
		}
		ev.Key = []byte(key)
		return nil
	}
}

// fieldOf matches a member name as encoding/json does.
func fieldOf(name string) int {
	for i, f := range [...]string{"id", "key", "amount", "ts"} {
		if name == f || strings.EqualFold(name, f) {
			return i
		}
	}
	return -1
}

func decodeGJSON(data []byte, ev *event.Event) error {
	if !utf8.Valid(data) {
		return errRefused
	}
	s := unsafe.String(unsafe.SliceData(data), len(data))
	if !gjson.Valid(s) {
		return errRefused
	}
	var last [4]gjson.Result
	gjson.Parse(s).ForEach(func(name, v gjson.Result) bool {
		if f := fieldOf(name.Str); f >= 0 {
			last[f] = v
		}
		return true
	})
	var err error
	if ev.ID, err = strconv.ParseInt(last[0].Raw, 10, 64); err != nil {
		return err
	}
	if ev.Amount, err = strconv.ParseInt(last[2].Raw, 10, 64); err != nil {
		return err
	}
	if ev.TS, err = strconv.ParseInt(last[3].Raw, 10, 64); err != nil {
		return err
	}
	k := last[1]
	if k.Type != gjson.String {
		return errRefused
	}
	ev.Key = data[k.Index+1 : k.Index+len(k.Raw)-1] // unescaped keys only, enough for the workloads
	return nil
}

// fastjsonDecoder validates (fastjson's parser alone accepts invalid
// strings and numbers such as 01 or NaN) and then parses into its reused
// Parser. The key it returns aliases the Parser's copy of the record, so
// it is copied into buf: ev.Key may not alias state the next call
// overwrites, and this is the cheapest copy.
type fastjsonDecoder struct {
	p   fastjson.Parser
	buf []byte
}

func (d *fastjsonDecoder) decode(data []byte, ev *event.Event) error {
	if !utf8.Valid(data) {
		return errRefused
	}
	if err := fastjson.ValidateBytes(data); err != nil {
		return err
	}
	v, err := d.p.ParseBytes(data)
	if err != nil {
		return err
	}
	o, err := v.Object()
	if err != nil {
		return err
	}
	var last [4]*fastjson.Value
	o.Visit(func(name []byte, v *fastjson.Value) {
		if f := fieldOf(unsafe.String(unsafe.SliceData(name), len(name))); f >= 0 {
			last[f] = v
		}
	})
	for _, f := range last {
		if f == nil {
			return errRefused
		}
	}
	if ev.ID, err = last[0].Int64(); err != nil {
		return err
	}
	if ev.Amount, err = last[2].Int64(); err != nil {
		return err
	}
	if ev.TS, err = last[3].Int64(); err != nil {
		return err
	}
	key, err := last[1].StringBytes()
	if err != nil {
		return err
	}
	d.buf = append(d.buf[:0], key...)
	ev.Key = d.buf
	return nil
}
