package event

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// OtherProducerWide returns n wide records as another producer writes them
// (json.dumps spacing): the four fields among eleven others — an array, a
// fraction, null, an object nested two levels — in a different order each
// record (deterministic). The decoder's tests and its comparison module
// (benchmarks/decoder) measure and check against the same records.
func OtherProducerWide(n int) [][]byte {
	g := NewGenerator(3, 1000)
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
