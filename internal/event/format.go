package event

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Format is how the generator writes an event's bytes. Every format carries
// the same four fields with the same values, so the totals a sink must hold
// do not depend on it; what changes is the work a decoder does per event.
type Format string

const (
	// FormatCompact is the canonical form Append writes:
	// {"id":1,"key":"k1","amount":5,"ts":1700000000000}.
	FormatCompact Format = "compact"
	// FormatSpaced is what Python's json.dumps writes by default:
	// {"id": 1, "key": "k1", "amount": 5, "ts": 1700000000000}, strings
	// ASCII-only (\uXXXX escapes), as producers written in Python send it.
	FormatSpaced Format = "spaced"
	// FormatWide buries the four fields among a dozen others (strings,
	// numbers, booleans, null and one nested object), about 600 bytes a
	// record, in an order that changes from record to record: what an
	// event from a real application looks like.
	FormatWide Format = "wide"
)

// Formats lists the formats, the default first.
var Formats = []Format{FormatCompact, FormatSpaced, FormatWide}

// ParseFormat returns the format named s ("" is compact).
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatCompact, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q: want compact, spaced or wide", s)
}

// AppendFormat writes one event in format f. The bytes depend only on the
// arguments: the wide format's other fields and their order are drawn from
// seed and id, so a seed's sequence is the same bytes (but for ts) every
// time it is produced. An unknown format writes compact.
func AppendFormat(dst []byte, f Format, seed uint64, id int64, key string, amount, ts int64) []byte {
	switch f {
	case FormatSpaced:
		return appendSpaced(dst, id, key, amount, ts)
	case FormatWide:
		return appendWide(dst, seed, id, key, amount, ts)
	}
	return Append(dst, id, key, amount, ts)
}

func appendSpaced(dst []byte, id int64, key string, amount, ts int64) []byte {
	dst = append(dst, `{"id": `...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `, "key": `...)
	dst = appendASCIIString(dst, key)
	dst = append(dst, `, "amount": `...)
	dst = strconv.AppendInt(dst, amount, 10)
	dst = append(dst, `, "ts": `...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}

// appendASCIIString quotes s as Python's json.dumps does with its default
// ensure_ascii=True: the short escapes for \" \\ \n \r \t \b \f, \u00XX for
// other control characters, and \uXXXX (a surrogate pair above U+FFFF) for
// everything outside ASCII. Invalid UTF-8 is written as U+FFFD: the
// generator's keys are ASCII, so this only matters to a caller's own keys.
func appendASCIIString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u4 := func(dst []byte, r rune) []byte {
		return append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	dst = append(dst, '"')
	for _, r := range s { // invalid bytes come as utf8.RuneError
		switch {
		case r == '"':
			dst = append(dst, '\\', '"')
		case r == '\\':
			dst = append(dst, '\\', '\\')
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\r':
			dst = append(dst, '\\', 'r')
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r == '\b':
			dst = append(dst, '\\', 'b')
		case r == '\f':
			dst = append(dst, '\\', 'f')
		case r < 0x20 || r == 0x7f: // json.dumps escapes all but ' '..'~'
			dst = u4(dst, r)
		case r < utf8.RuneSelf:
			dst = append(dst, byte(r))
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			dst = u4(u4(dst, r1), r2)
		default:
			dst = u4(dst, r)
		}
	}
	return append(dst, '"')
}

// Values the wide format draws its other fields from.
var (
	wideTypes     = []string{"purchase", "refund", "page_view", "add_to_cart", "checkout_started", "subscription_renewed"}
	wideSources   = []string{"web-frontend-eu-west-1", "mobile-ios-3.14.2", "mobile-android-3.14.0", "partner-api-v2", "batch-import"}
	wideAgents    = []string{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1", "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.6367.82 Mobile Safari/537.36"}
	wideCurrency  = []string{"EUR", "USD", "GBP", "CHF", "JPY"}
	wideCountries = []string{"DE", "FR", "US", "GB", "JP", "BR", "IN"}
	wideCities    = []string{"Berlin", "Lyon", "Austin", "Leeds", "Osaka", "Recife", "Pune"}
	wideReferrers = []string{"https://www.example.com/search?q=running+shoes&page=2", "https://news.example.org/2026/11/black-friday-deals-roundup", "android-app://com.example.shop/home", ""}
	wideComments  = []string{"", "gift wrap requested", "customer asked for delivery after 6 pm, leave at the back door if nobody answers", "retry of an earlier attempt that timed out at the payment provider"}
)

// wideFields is the number of top-level fields of a wide record.
const wideFields = 17

// appendWide writes the four fields and thirteen others, shuffled. None of
// the other names matches id, key, amount or ts in any letter case
// (encoding/json matches field names case-insensitively).
func appendWide(dst []byte, seed uint64, id int64, key string, amount, ts int64) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(id)^0x2545f4914f6cdd1d))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	hexN := func(dst []byte, n int) []byte {
		const hex = "0123456789abcdef"
		for range n {
			dst = append(dst, hex[rng.IntN(16)])
		}
		return dst
	}
	var order [wideFields]int
	for i := range order {
		order[i] = i
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	dst = append(dst, '{')
	for n, f := range order {
		if n > 0 {
			dst = append(dst, ',')
		}
		switch f {
		case 0:
			dst = append(dst, `"id":`...)
			dst = strconv.AppendInt(dst, id, 10)
		case 1:
			dst = append(dst, `"key":`...)
			dst = appendASCIIString(dst, key)
		case 2:
			dst = append(dst, `"amount":`...)
			dst = strconv.AppendInt(dst, amount, 10)
		case 3:
			dst = append(dst, `"ts":`...)
			dst = strconv.AppendInt(dst, ts, 10)
		case 4:
			dst = append(dst, `"event_type":"`...)
			dst = append(dst, pick(wideTypes)...)
			dst = append(dst, '"')
		case 5:
			dst = append(dst, `"source":"`...)
			dst = append(dst, pick(wideSources)...)
			dst = append(dst, '"')
		case 6:
			dst = append(dst, `"user_agent":"`...)
			dst = append(dst, pick(wideAgents)...)
			dst = append(dst, '"')
		case 7:
			dst = append(dst, `"session_id":"`...)
			dst = hexN(dst, 32)
			dst = append(dst, '"')
		case 8:
			dst = append(dst, `"trace":"`...)
			dst = hexN(dst, 16)
			dst = append(dst, '"')
		case 9:
			dst = append(dst, `"currency":"`...)
			dst = append(dst, pick(wideCurrency)...)
			dst = append(dst, '"')
		case 10:
			dst = append(dst, `"unit_price":`...)
			dst = strconv.AppendFloat(dst, float64(rng.IntN(100000))/100, 'f', -1, 64)
		case 11:
			dst = append(dst, `"quantity":`...)
			dst = strconv.AppendInt(dst, 1+rng.Int64N(12), 10)
		case 12:
			dst = append(dst, `"is_test":`...)
			dst = strconv.AppendBool(dst, rng.IntN(10) == 0)
		case 13:
			dst = append(dst, `"coupon":null`...)
		case 14:
			dst = append(dst, `"comment":"`...)
			dst = append(dst, pick(wideComments)...)
			dst = append(dst, '"')
		case 15:
			c := rng.IntN(len(wideCountries))
			dst = append(dst, `"geo":{"country":"`...)
			dst = append(dst, wideCountries[c]...)
			dst = append(dst, `","city":"`...)
			dst = append(dst, wideCities[c]...)
			dst = append(dst, `","lat":`...)
			dst = strconv.AppendFloat(dst, float64(rng.IntN(18000000)-9000000)/100000, 'f', -1, 64)
			dst = append(dst, `,"lon":`...)
			dst = strconv.AppendFloat(dst, float64(rng.IntN(36000000)-18000000)/100000, 'f', -1, 64)
			dst = append(dst, `,"verified":`...)
			dst = strconv.AppendBool(dst, rng.IntN(2) == 0)
			dst = append(dst, `,"postcode":null}`...)
		case 16:
			dst = append(dst, `"referrer":"`...)
			dst = append(dst, pick(wideReferrers)...)
			dst = append(dst, '"')
		}
	}
	return append(dst, '}')
}
