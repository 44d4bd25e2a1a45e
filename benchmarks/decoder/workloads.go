package decoder

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/microbatch/microbatch/internal/event"
)

// The workloads of internal/event's BenchmarkDecodeWorkloads, written the
// same way: what the generator writes, what Python's json.dumps writes,
// and a wide record (the four fields among others, one nested, in varying
// order).

// Workload is a named set of records.
type Workload struct {
	Name string
	Recs [][]byte
}

// Workloads returns the three workloads of n records each.
func Workloads(n int) []Workload {
	return []Workload{{"compact", compact(n)}, {"spaced", spaced(n)}, {"wide", wide(n)}}
}

func compact(n int) [][]byte {
	g := event.NewGenerator(1, 1000)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = event.Append(nil, id, k, a, 1700000000000+int64(i))
	}
	return recs
}

func spaced(n int) [][]byte {
	g := event.NewGenerator(2, 1000)
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		recs[i] = fmt.Appendf(nil, `{"id": %d, "key": "k-%s", "amount": %d, "ts": %d}`, id, k[1:], a, 1700000000000+int64(i))
	}
	return recs
}

func wide(n int) [][]byte {
	g := event.NewGenerator(3, 1000)
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([][]byte, n)
	for i := range recs {
		id, k, a := g.Next()
		fields := []string{
			`"id": ` + strconv.FormatInt(id, 10),
			`"key": "user-` + k[1:] + `"`,
			`"amount": ` + strconv.FormatInt(a, 10),
			`"ts": ` + strconv.FormatInt(1700000000000+int64(i), 10),
			`"event_type": "purchase"`,
			`"currency": "EUR"`,
			`"session_id": "3f2a9c1e-7b4d-4e8a-9f0c-` + fmt.Sprintf("%012d", i) + `"`,
			`"user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"`,
			`"ip": "203.0.113.` + strconv.Itoa(i%256) + `"`,
			`"country": "DE"`,
			`"is_test": false`,
			`"discount": 0.15`,
			`"tags": ["web", "promo", "2024-q4"]`,
			`"customer": {"id": ` + strconv.Itoa(i%5000) + `, "tier": "gold", "since": "2019-04-01", "address": {"city": "Berlin", "zip": "10115"}, "score": null}`,
			`"note": null`,
		}
		rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
		recs[i] = []byte("{" + strings.Join(fields, ", ") + "}")
	}
	return recs
}
