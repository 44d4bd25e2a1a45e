package writers

// The Redis writer is the sink of the `idempotent` strategy. Redis has no
// transaction that could hold a batch's results together with its offsets
// across the time it takes to process the batch, so exactly-once is built
// from three pieces instead:
//
//  1. A logged plan. The offset ranges of batch N are written (LogPlan)
//     before the batch is read, and whoever finishes the batch after a
//     crash or a rebalance re-runs the logged ranges (PendingRanges), so a
//     replay reads exactly the records of the first attempt even if more
//     arrived in between.
//  2. Deterministic contribution keys. Each partition range's results are
//     written (WriteContribution) under a key named after the range,
//     mb:{job}:contrib:{topic}:{partition}:{from}-{to}, replacing whatever
//     the key held: writing a range twice leaves the same key, not twice the
//     totals.
//  3. An atomic, offset-guarded fold. One Lua script (Fold) checks the
//     fencing epochs, the logged plan and every range's stored offset first,
//     and only then adds the contributions into the users' totals, moves
//     their dead letters, advances the offsets and deletes the
//     contributions. A range is folded only while its offset still equals
//     the range's start, so no batch is ever counted twice, and a fold that
//     fails changes nothing.
//
// Fencing and the plan log are per partition, because the processes of a
// consumer group share a job, each owning some partitions, and partitions
// move between them at rebalances. A claim (ClaimPartitions) stamps a new
// epoch on the partitions it takes, and every script refuses a range whose
// partition carries a newer epoch than the caller's: the process that held
// a partition before can't write it any more, even if it still owns others,
// while a member claiming its own partitions fences nobody else's. A
// partition without an epoch of its own falls back to the job's epoch, which
// is always the newest ever handed out; Claim, the whole-job claim of a
// single instance, raises it and drops every partition's own epoch, so it
// fences every older holder of every partition. Likewise the plan log keeps
// each partition's last logged range (plan:parts): a process given a
// partition at a rebalance finishes the range its previous owner logged but
// did not fold, with the same records and batch id, so no contribution is
// orphaned. Batch ids come from one counter per job (NextBatchID), so no two
// processes log the same id.
//
// Key layout ({job} is a Redis hash tag: all keys of a job live in one
// cluster slot, which a multi-key script needs):
//
//	mb:{job}:totals:events   hash  event key -> events      (users' view)
//	mb:{job}:totals:amount   hash  event key -> amount sum  (users' view;
//	                               exact, past int64 too: sums are decimal
//	                               integers of any size, HGET them as text)
//	mb:{job}:offsets         hash  "topic/partition" -> next offset
//	mb:{job}:epoch           string  highest epoch handed out for the job;
//	                               the epoch of partitions not in epochs
//	mb:{job}:epochs          hash  "topic/partition" -> epoch of its last claim
//	mb:{job}:batch           string  last batch id handed out (NextBatchID)
//	mb:{job}:plan:{batchID}  string  JSON [{topic, partition, from, to}]
//	                               (for LastPlan and inspection; the last 100 ids kept)
//	mb:{job}:plan:last       string  highest batch id logged
//	mb:{job}:plan:parts      hash  "topic/partition" -> "{batchID} {from} {to}",
//	                               the partition's last logged range
//	mb:{job}:contrib:{topic}:{partition}:{from}-{to}
//	                         hash  "t:"+key -> "events,amount",
//	                               "a:"+table+":"+column+NUL+row key -> sum,
//	                               "s:"+table+":"+column+NUL+row key -> text
//	                                 (a user-defined job's rows, MergeAdd / MergeReplace),
//	                               "d:"+offset -> dead letter JSON,
//	                               "n" -> how many dead letters are staged,
//	                               "m" -> the range (marks even an empty one)
//	mb:{job}:contrib:{topic}:{partition}:{from}-{to}:dead
//	                         hash  offset -> dead letter JSON: a large
//	                               contribution's dead letters, staged in
//	                               bounded steps before it (RedisContribution)
//	mb:{job}:dead:{topic}:{partition}
//	                         hash  offset -> {"reason": …, "payload": base64}
//	mb:{job}:rows:{table}:{column}
//	                         hash  row key -> value  (users' view of a
//	                               user-defined job: one hash per value
//	                               column of its Upsert; RedisRowField)
//
// A user-defined job (strategies.NewTransform) writes rows of an Upsert
// instead of per-key totals (WriteRowsContribution, FoldRows): the same
// plan, contribution keys, fencing and fold, so the same guarantee, with
// the rows hashes in place of the totals hashes.
//
// Guarantee: the totals hashes count every record exactly once once the job
// has caught up. A reader during a run or a recovery may find a batch not
// yet counted (its contribution is written but not folded), never counted
// twice and never half counted; totals, dead letters and offsets always
// agree with each other, because the fold moves all three at once.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/microbatch/microbatch/internal/exact"
	"github.com/microbatch/microbatch/internal/redact"
	"github.com/microbatch/microbatch/internal/values"
	"github.com/microbatch/microbatch/offsets"
	"github.com/microbatch/microbatch/record"
)

// Redis client defaults. Reads wait long because a fold of a large batch
// runs as one script and answers only when it is done.
const (
	redisDialTimeout  = 5 * time.Second
	redisReadTimeout  = 30 * time.Second
	redisWriteTimeout = 30 * time.Second
	redisDefaultPort  = "6379"
)

// redisPlansKept is how many batch ids back LogPlan keeps plan:{id} keys.
// They are there for inspection and LastPlan: replays take their ranges from
// plan:parts, which holds every partition's last logged range however old.
const redisPlansKept = 100

// redisHSETChunk bounds the field/value pairs of one HSET inside a script
// (Lua's unpack has a stack limit of about 8000 values).
const redisHSETChunk = 1000

// redisDeadChunkBytes bounds the encoded dead letters of one script call:
// a contribution's dead letters beyond it are staged in calls of about this
// size (RedisContribution), so neither this process nor Redis holds them
// all in one request.
const redisDeadChunkBytes = 4 << 20

// rangeField is the range's field in mb:{job}:offsets, epochs and plan:parts.
func rangeField(r record.Range) string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10)
}

// rangeMark is the range as its contribution's "m" field holds it (it marks
// even an empty contribution).
func rangeMark(r record.Range) string {
	return fmt.Sprintf("%s/%d [%d, %d)", r.Topic, r.Partition, r.From, r.To)
}

func validateRange(r record.Range) error {
	if !record.ValidTopic(r.Topic) || r.Partition < 0 || r.From < 0 || r.From >= r.To {
		// From == To is refused too: an empty range would look "not yet
		// folded" after its fold as well, and fold twice.
		return fmt.Errorf("writers: bad range %v (want a Kafka topic name, partition >= 0, 0 <= from < to)", r)
	}
	return nil
}

// validateRanges checks each range and that no partition appears twice: two
// ranges of one partition in one fold would both be checked against the
// same stored offset.
func validateRanges(rs []record.Range) error {
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if err := validateRange(r); err != nil {
			return err
		}
		if seen[rangeField(r)] {
			return fmt.Errorf("writers: partition %s appears twice in one batch", rangeField(r))
		}
		seen[rangeField(r)] = true
	}
	return nil
}

// Total is one event key's contribution of a range: how many events and
// their amount sum.
type Total struct {
	Key    string
	Events int64
	Amount int64
}

// Key names; see the layout at the top of the file.

func redisKey(job string, parts ...string) string {
	return "mb:{" + job + "}:" + strings.Join(parts, ":")
}

// RedisEventsKey is the hash of per-key event counts users read.
func RedisEventsKey(job string) string { return redisKey(job, "totals", "events") }

// RedisAmountKey is the hash of per-key amount sums users read.
func RedisAmountKey(job string) string { return redisKey(job, "totals", "amount") }

func redisOffsetsKey(job string) string   { return redisKey(job, "offsets") }
func redisEpochKey(job string) string     { return redisKey(job, "epoch") }
func redisEpochsKey(job string) string    { return redisKey(job, "epochs") }
func redisBatchKey(job string) string     { return redisKey(job, "batch") }
func redisPlanPartsKey(job string) string { return redisKey(job, "plan", "parts") }
func redisPlanKey(job string, id int64) string {
	return redisKey(job, "plan", strconv.FormatInt(id, 10))
}
func redisLastPlanKey(job string) string { return redisKey(job, "plan", "last") }
func redisContribKey(job string, r record.Range) string {
	return redisKey(job, "contrib", r.Topic, strconv.FormatInt(int64(r.Partition), 10),
		strconv.FormatInt(r.From, 10)+"-"+strconv.FormatInt(r.To, 10))
}
func redisContribDeadKey(job string, r record.Range) string { return redisContribKey(job, r) + ":dead" }
func redisDeadKey(job, topic string, part int32) string {
	return redisKey(job, "dead", topic, strconv.FormatInt(int64(part), 10))
}

// checkJob refuses names that would break the hash tag: a "}" would end it
// early and let two jobs' key spaces overlap.
func checkJob(job string) error {
	if job == "" || strings.ContainsAny(job, "{}") {
		return fmt.Errorf("writers: job name %q can't be used in Redis keys (empty, or has { or })", job)
	}
	return nil
}

// ParseRedisDSN accepts
//
//	redis://[[user]:password@]host[:port][/db]     (port 6379, db 0 by default)
//	rediss://…                                     (the same over TLS)
//
// The options it returns disable go-redis's own command retries: whether a
// command may be repeated is the caller's decision (IsRedisRetryable), as
// with the SQL writer. display is the address with the password hidden
// (redact.DSN); errors never contain the password.
func ParseRedisDSN(dsn string) (opts *redis.Options, display string, err error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || (scheme != "redis" && scheme != "rediss") {
		if ok && HasScheme(dsn) {
			return nil, "", fmt.Errorf("%w: unknown scheme %q (want redis:// or rediss://)", ErrBadDSN, scheme)
		}
		return nil, "", fmt.Errorf("%w: want redis://[:password@]host:port/db", ErrBadDSN)
	}
	// url.Parse's own errors quote the whole DSN, password included.
	u, perr := url.Parse(dsn)
	if perr != nil {
		return nil, "", fmt.Errorf("%w: %q is not a URL", ErrBadDSN, redact.DSN(dsn))
	}
	if u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, "", fmt.Errorf("%w: %q: want redis://[:password@]host:port/db (no parameters)", ErrBadDSN, redact.DSN(dsn))
	}
	port := u.Port()
	if port == "" {
		port = redisDefaultPort
	} else if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return nil, "", fmt.Errorf("%w: %q: bad port", ErrBadDSN, redact.DSN(dsn))
	}
	db := 0
	if path := strings.TrimPrefix(u.Path, "/"); path != "" {
		n, err := strconv.Atoi(path)
		if err != nil || n < 0 {
			return nil, "", fmt.Errorf("%w: %q: the path must be a database number", ErrBadDSN, redact.DSN(dsn))
		}
		db = n
	}
	opts = &redis.Options{
		Addr:                  net.JoinHostPort(u.Hostname(), port),
		DB:                    db,
		DialTimeout:           redisDialTimeout,
		ReadTimeout:           redisReadTimeout,
		WriteTimeout:          redisWriteTimeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	}
	userinfo := ""
	if u.User != nil {
		opts.Username = u.User.Username()
		opts.Password, _ = u.User.Password()
		userinfo = opts.Username
		if opts.Password != "" {
			userinfo += ":" + opts.Password
		}
		if userinfo != "" {
			userinfo += "@"
		}
	}
	if scheme == "rediss" {
		opts.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12, RootCAs: RootCAs()}
	}
	return opts, redact.DSN(scheme + "://" + userinfo + opts.Addr + "/" + strconv.Itoa(db)), nil
}

// Redis writes a job's results to Redis; see the top of the file for the
// protocol, key layout and guarantee. It is safe for concurrent use:
// partition tasks may write contributions and fold in parallel.
//
// Every call may be repeated after a retryable error (IsRedisRetryable),
// even when the first attempt may have landed: WriteContribution replaces
// its key or does nothing once the range is folded (so do a
// RedisContribution's calls; staging a dead letter again overwrites it),
// LogPlan accepts the same plan again, Fold skips ranges already folded, a
// repeated Claim or ClaimPartitions only takes a higher epoch, which fences
// nobody but the caller's own past, and a repeated NextBatchID skips an id.
type Redis struct {
	c       redis.UniversalClient
	display string

	closeOnce sync.Once
	closeErr  error
}

// OpenRedis connects to the Redis named by dsn (see ParseRedisDSN) and
// checks that it answers.
func OpenRedis(ctx context.Context, dsn string) (*Redis, error) {
	opts, display, err := ParseRedisDSN(dsn)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to sink %s: %w", display, err)
	}
	w := NewRedis(c)
	w.display = display
	return w, nil
}

// NewRedis wraps a client the caller made (a cluster client works too: a
// job's keys share one slot). Close closes it. Set MaxRetries to -1 to keep
// go-redis from repeating commands behind the caller's back.
func NewRedis(c redis.UniversalClient) *Redis {
	return &Redis{c: c, display: "redis"}
}

// Client returns the underlying client, e.g. for reading results.
func (w *Redis) Client() redis.UniversalClient { return w.c }

// String is the sink address without its password.
func (w *Redis) String() string { return w.display }

// Close closes the client. Safe to call twice.
func (w *Redis) Close() error {
	w.closeOnce.Do(func() { w.closeErr = w.c.Close() })
	return w.closeErr
}

// claimScript: KEYS epoch, epochs. The new job epoch is newer than every
// partition's (the job epoch is the highest ever handed out), and with the
// partitions' own epochs gone it is every partition's effective epoch.
var claimScript = redis.NewScript(`
local e = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
return e
`)

// Claim takes the whole job for this instance: it increments the job's
// epoch, drops every partition's own epoch (ClaimPartitions) so that all
// fall back to the new job epoch, and returns it. Writes carrying an older
// epoch are refused from then on for every partition (offsets.ErrFenced), so
// no earlier instance or group member can write. It is the claim of a
// single instance; the members of a consumer group use ClaimPartitions.
func (w *Redis) Claim(ctx context.Context, job string) (int64, error) {
	if err := checkJob(job); err != nil {
		return 0, err
	}
	epoch, err := claimScript.Run(ctx, w.c, []string{redisEpochKey(job), redisEpochsKey(job)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("claiming job %s on %s: %w", job, w.display, err)
	}
	return epoch, nil
}

// claimPartsScript: KEYS epoch, epochs; ARGV minEpoch, then the partitions'
// fields.
var claimPartsScript = redis.NewScript(`
local e = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
if tonumber(ARGV[1]) > e then
  e = tonumber(ARGV[1])
end
local s = string.format('%d', e)
redis.call('SET', KEYS[1], s)
for i = 2, #ARGV do
  redis.call('HSET', KEYS[2], ARGV[i], s)
end
return e
`)

// ClaimPartitions takes partitions parts of topic for one member of a
// consumer group, in one atomic step: it takes
// epoch = max(minEpoch, 1 + the job's epoch) — minEpoch is the group
// generation, and the +1 keeps every claim newer than all before it even
// after a deleted group restarted its generations at 1 — raises the job's
// epoch to it and stamps it on parts only. The member that held one of parts
// before is fenced (offsets.ErrFenced) from then on for that partition,
// while the other members keep theirs; so is a whole-job Claim holder, for
// every partition, because partitions without an epoch of their own take the
// job's.
func (w *Redis) ClaimPartitions(ctx context.Context, job, topic string, parts []int32, minEpoch int64) (int64, error) {
	if err := checkJob(job); err != nil {
		return 0, err
	}
	if !record.ValidTopic(topic) {
		return 0, fmt.Errorf("writers: bad topic name %q", topic)
	}
	args := make([]any, 0, 1+len(parts))
	args = append(args, minEpoch)
	for _, p := range parts {
		if p < 0 {
			return 0, fmt.Errorf("writers: bad partition %d", p)
		}
		args = append(args, rangeField(record.Range{Topic: topic, Partition: p}))
	}
	epoch, err := claimPartsScript.Run(ctx, w.c, []string{redisEpochKey(job), redisEpochsKey(job)}, args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("claiming partitions %v of %s for job %s on %s: %w", parts, topic, job, w.display, err)
	}
	return epoch, nil
}

// nextBatchScript: KEYS batch, plan:last.
var nextBatchScript = redis.NewScript(`
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last > n then
  n = last
end
n = n + 1
redis.call('SET', KEYS[1], string.format('%d', n))
return n
`)

// NextBatchID hands out the job's next batch id from a counter all the
// processes of the job share (mb:{job}:batch), so no two of them log the
// same id. Ids increase strictly and are always above every id logged so
// far (plan:last), also when a job logged ids of its own before it used
// the counter.
func (w *Redis) NextBatchID(ctx context.Context, job string) (int64, error) {
	if err := checkJob(job); err != nil {
		return 0, err
	}
	id, err := nextBatchScript.Run(ctx, w.c, []string{redisBatchKey(job), redisLastPlanKey(job)}).Int64()
	if err != nil {
		return 0, fmt.Errorf("taking a batch id for job %s: %w", job, err)
	}
	return id, nil
}

// Offsets returns the job's next offsets for topic, by partition.
func (w *Redis) Offsets(ctx context.Context, job, topic string) (map[int32]int64, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	all, err := w.c.HGetAll(ctx, redisOffsetsKey(job)).Result()
	if err != nil {
		return nil, fmt.Errorf("reading offsets of job %s: %w", job, err)
	}
	out := make(map[int32]int64)
	for f, v := range all {
		t, p, ok := strings.Cut(f, "/")
		if !ok || t != topic {
			continue
		}
		part, perr := strconv.ParseInt(p, 10, 32)
		off, oerr := strconv.ParseInt(v, 10, 64)
		if perr != nil || oerr != nil {
			return nil, fmt.Errorf("reading offsets of job %s: bad entry %q = %q", job, f, v)
		}
		out[int32(part)] = off
	}
	return out, nil
}

// InitOffsets sets the start offset of each partition that has none yet.
// Existing offsets never move: a restart passing its configured start again
// resumes where the job was.
func (w *Redis) InitOffsets(ctx context.Context, job, topic string, start map[int32]int64) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if !record.ValidTopic(topic) {
		return fmt.Errorf("writers: bad topic name %q", topic)
	}
	key := redisOffsetsKey(job)
	_, err := w.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part, off := range start {
			if part < 0 || off < 0 {
				return fmt.Errorf("writers: bad start %d for partition %d", off, part)
			}
			p.HSetNX(ctx, key, topic+"/"+strconv.FormatInt(int64(part), 10), off)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("initialising offsets of job %s: %w", job, err)
	}
	return nil
}

// redisFenceLua defines fence(epochKey, epochsKey, field, epoch, what) for
// the scripts: an error reply if the effective epoch of partition field —
// its own in epochs, else the job's — is newer than the caller's epoch, else
// nil. Only the partitions a script touches are checked: a newer epoch on
// another member's partitions is none of this caller's business.
const redisFenceLua = `
local function fence(ek, esk, field, epoch, what)
  local e = redis.call('HGET', esk, field) or redis.call('GET', ek) or '0'
  if tonumber(e) > tonumber(epoch) then
    return redis.error_reply('MBFENCED ' .. field .. ' was claimed with epoch ' .. e .. ', the ' .. what .. ' has ' .. epoch)
  end
  return nil
end
`

// logPlanScript: KEYS epoch, epochs, offsets, plan:parts, plan:{id},
// plan:last, plan:{id-kept}; ARGV epoch, id, plan JSON, then per range its
// field, from, to. It checks everything before it writes anything.
var logPlanScript = redis.NewScript(redisFenceLua + `
local n = (#ARGV - 3) / 3
for i = 1, n do
  local err = fence(KEYS[1], KEYS[2], ARGV[3 * i + 1], ARGV[1], 'plan')
  if err then
    return err
  end
end
local cur = redis.call('GET', KEYS[5])
if cur and cur ~= ARGV[3] then
  return redis.error_reply('MBCONFLICT batch ' .. ARGV[2] .. ' was planned with other ranges: ' .. cur)
end
for i = 1, n do
  local field, from, to = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  local logged = redis.call('HGET', KEYS[4], field)
  if logged then
    local lid, lfrom, lto = string.match(logged, '^(%d+) (%d+) (%d+)$')
    if not lid then
      return redis.error_reply('MBCORRUPT ' .. KEYS[4] .. ' field ' .. field .. ' = ' .. logged)
    end
    if (from ~= lfrom or to ~= lto) and redis.call('HGET', KEYS[3], field) == lfrom then
      return redis.error_reply('MBCONFLICT ' .. field .. ' ' .. from .. '-' .. to .. ': the range ' .. lfrom .. '-' .. lto .. ' logged by batch ' .. lid .. ' is not folded yet')
    end
  end
end
redis.call('SET', KEYS[5], ARGV[3])
for i = 1, n do
  redis.call('HSET', KEYS[4], ARGV[3 * i + 1], ARGV[2] .. ' ' .. ARGV[3 * i + 2] .. ' ' .. ARGV[3 * i + 3])
end
local last = redis.call('GET', KEYS[6])
if not last or tonumber(last) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[6], ARGV[2])
end
redis.call('DEL', KEYS[7])
return 1
`)

// LogPlan records batch batchID's ranges before the batch is processed: as
// each partition's last logged range (plan:parts), which Fold checks and
// PendingRanges returns, and as plan:{batchID}. It is fenced per partition
// (offsets.ErrFenced if any range's partition was claimed with a newer epoch
// than epoch) and accepts the same plan again (a replay). It refuses
// (offsets.ErrConflict) a different plan for a logged batch id, and, for a
// partition whose logged range is not folded yet, any other range than
// that one: either would mean a replay that reads other records than the
// first attempt. Ids may arrive out of order (processes of a group take
// them from NextBatchID); plan:last keeps the highest. An empty plan is
// refused: there is nothing to replay, and nothing to fence it by.
func (w *Redis) LogPlan(ctx context.Context, job string, epoch, batchID int64, ranges []record.Range) error {
	if err := checkJob(job); err != nil {
		return err
	}
	if err := validateRanges(ranges); err != nil {
		return err
	}
	if batchID < 0 {
		return fmt.Errorf("writers: bad batch id %d", batchID)
	}
	if len(ranges) == 0 {
		return fmt.Errorf("writers: batch %d has no ranges to log", batchID)
	}
	plan, err := json.Marshal(ranges)
	if err != nil {
		return fmt.Errorf("logging plan of batch %d: %w", batchID, err)
	}
	keys := []string{redisEpochKey(job), redisEpochsKey(job), redisOffsetsKey(job), redisPlanPartsKey(job),
		redisPlanKey(job, batchID), redisLastPlanKey(job), redisPlanKey(job, batchID-redisPlansKept)}
	args := make([]any, 0, 3+3*len(ranges))
	args = append(args, epoch, batchID, plan)
	for _, r := range ranges {
		args = append(args, rangeField(r), r.From, r.To)
	}
	if err := logPlanScript.Run(ctx, w.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("logging plan of batch %d of job %s: %w", batchID, job, scriptError(err))
	}
	return nil
}

// LastPlan returns the logged plan with the highest batch id; ok is false if
// the job has none. It is the recovery of a single instance, which logs
// every partition in every batch: after a restart, re-run it — ranges whose
// offset already equals To were folded and are to be skipped
// (WriteContribution and Fold skip them anyway), the others are re-read and
// re-written. In a consumer group the last plan is just some member's; a
// member finishes what its partitions' previous owners left with
// PendingRanges instead.
func (w *Redis) LastPlan(ctx context.Context, job string) (batchID int64, ranges []record.Range, ok bool, err error) {
	if err := checkJob(job); err != nil {
		return 0, nil, false, err
	}
	id, err := w.c.Get(ctx, redisLastPlanKey(job)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil, false, nil
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("reading last plan of job %s: %w", job, err)
	}
	plan, err := w.c.Get(ctx, redisPlanKey(job, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w: the plan key is gone", id, job, ErrRedisMissing)
	}
	if err != nil {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w", id, job, err)
	}
	if err := json.Unmarshal(plan, &ranges); err != nil {
		return 0, nil, false, fmt.Errorf("reading plan %d of job %s: %w", id, job, err)
	}
	return id, ranges, true, nil
}

// PlannedRange is a logged range with the batch that logged it.
type PlannedRange struct {
	BatchID int64
	record.Range
}

// PendingRanges returns, sorted by partition, the logged ranges of the given
// partitions of topic that are not folded yet: those whose stored offset
// still equals the logged From. A process that was just given partitions
// (at a start or a rebalance) finishes these first, before it plans
// anything new for them: it writes each contribution again (the same
// records: the range is fixed) and folds them with their logged BatchID.
// LogPlan refuses other ranges for those partitions until then.
//
// It reads without fencing. The answer is one consistent snapshot, but a
// partition's previous owner may still fold its range afterwards until it
// is fenced by a claim: claim the partitions (ClaimPartitions) before
// calling it.
func (w *Redis) PendingRanges(ctx context.Context, job, topic string, parts []int32) ([]PlannedRange, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	if !record.ValidTopic(topic) {
		return nil, fmt.Errorf("writers: bad topic name %q", topic)
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	parts = slices.Compact(parts)
	if len(parts) == 0 {
		return nil, nil
	}
	fields := make([]string, len(parts))
	for i, p := range parts {
		if p < 0 {
			return nil, fmt.Errorf("writers: bad partition %d", p)
		}
		fields[i] = rangeField(record.Range{Topic: topic, Partition: p})
	}
	var logged, stored *redis.SliceCmd
	if _, err := w.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		logged = p.HMGet(ctx, redisPlanPartsKey(job), fields...)
		stored = p.HMGet(ctx, redisOffsetsKey(job), fields...)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading pending ranges of job %s: %w", job, err)
	}
	var out []PlannedRange
	for i, p := range parts {
		entry, ok := logged.Val()[i].(string)
		if !ok {
			continue // never planned
		}
		var pr PlannedRange
		if _, err := fmt.Sscanf(entry, "%d %d %d", &pr.BatchID, &pr.From, &pr.To); err != nil {
			return nil, fmt.Errorf("reading pending ranges of job %s: bad plan entry %s = %q", job, fields[i], entry)
		}
		off, ok := stored.Val()[i].(string)
		if !ok || off != strconv.FormatInt(pr.From, 10) {
			continue // folded (or the offset is elsewhere, which Fold reports)
		}
		pr.Topic, pr.Partition = topic, p
		out = append(out, pr)
	}
	return out, nil
}

// redisContribCheckLua checks a contribution write: fenced, and the range
// still at its start. It returns folded from the script if the range was
// folded already (nothing to write; a late write would only leave keys no
// fold ever takes). KEYS epoch, epochs, offsets; ARGV epoch, the range's
// field, from, to.
func redisContribCheckLua(folded string) string {
	return `
local err = fence(KEYS[1], KEYS[2], ARGV[2], ARGV[1], 'write')
if err then
  return err
end
local off = redis.call('HGET', KEYS[3], ARGV[2])
if not off then
  return redis.error_reply('MBNOROW no offset for ' .. ARGV[2])
end
if off == ARGV[4] then
  return ` + folded + `
end
if off ~= ARGV[3] then
  return redis.error_reply('MBCONFLICT ' .. ARGV[2] .. ' is at ' .. off .. ', the range is ' .. ARGV[3] .. '-' .. ARGV[4])
end
`
}

// redisHSETLua defines hset(key, first): HSET of ARGV[first..] as
// field/value pairs, in chunks; it returns how many fields were new.
var redisHSETLua = `
local function hset(key, first)
  local added = 0
  local i = first
  while i <= #ARGV do
    local j = math.min(i + 2 * ` + strconv.Itoa(redisHSETChunk) + ` - 1, #ARGV)
    added = added + redis.call('HSET', key, unpack(ARGV, i, j))
    i = j + 1
  end
  return added
end
`

// writeContribScript: KEYS epoch, epochs, offsets, contrib, staged dead
// letters; ARGV epoch, the range's field, from, to, then field/value
// pairs. Returns 1 if written, 0 if the range was folded already. Without
// an "n" field (no dead letters staged for this contribution) it drops
// whatever an earlier attempt staged.
var writeContribScript = redis.NewScript(redisFenceLua + redisHSETLua + redisContribCheckLua("0") + `
redis.call('DEL', KEYS[4])
hset(KEYS[4], 5)
if redis.call('HEXISTS', KEYS[4], 'n') == 0 then
  redis.call('DEL', KEYS[5])
end
return 1
`)

// stageDeadScript: KEYS epoch, epochs, offsets, contrib, staged dead
// letters; ARGV epoch, the range's field, from, to, "1" to start afresh
// (drop the contribution and what an earlier attempt staged) or "0", then
// offset/dead letter JSON pairs. Returns how many offsets were new, or -1
// if the range was folded already.
var stageDeadScript = redis.NewScript(redisFenceLua + redisHSETLua + redisContribCheckLua("-1") + `
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[4], KEYS[5])
end
return hset(KEYS[5], 6)
`)

// deadLetterJSON is a dead letter's value in Redis; Payload is base64 in JSON.
type deadLetterJSON struct {
	Reason  string `json:"reason"`
	Payload []byte `json:"payload"`
}

// WriteContribution stores range r's results: per-key totals (repeated keys
// are summed, exactly: a key's sum may pass int64) and dead letters, which
// must lie in r. It replaces the range's contribution, so a fold sees the
// old or the new content, never a mix, and writing a range again (a
// replay) is harmless. Once the range is folded it writes nothing and
// returns nil. Nothing is visible to users until Fold. It is fenced by the
// epoch of r's partition (offsets.ErrFenced). Dead letters of more than a
// few MiB are written in several steps (see RedisContribution, which also
// takes them in parts).
func (w *Redis) WriteContribution(ctx context.Context, job string, epoch int64, r record.Range, totals []Total, dls []record.DeadLetter) error {
	c, err := w.NewContribution(job, epoch, r)
	if err != nil {
		return err
	}
	return c.Totals(ctx, totals, dls)
}

// RedisContribution writes one range's contribution in steps, so that its
// dead letters need not fit in memory, or in one request: DeadLetters, as
// often as needed, stages them under the contribution (in
// mb:{job}:contrib:…:dead, in calls of a few MiB), then Totals or Rows
// writes the results, which completes the contribution. The first
// DeadLetters call drops the range's contribution and whatever an earlier
// attempt staged, so until the last call a fold finds no contribution
// (ErrRedisMissing) rather than a mix; the fold moves the staged dead
// letters with the rest, atomically, and refuses a contribution whose
// staged dead letters are incomplete. Every call is fenced and does nothing
// once the range is folded, as WriteContribution. An attempt that fails
// part-way is redone with a new RedisContribution, from the start. Not
// safe for concurrent use.
type RedisContribution struct {
	w      *Redis
	job    string
	epoch  int64
	r      record.Range
	staged int64 // dead letters staged by this writer
	fresh  bool  // this writer's first staging call dropped the old ones
	folded bool  // the range is folded: nothing to write
}

// NewContribution starts writing range r's contribution for job under
// epoch (see RedisContribution).
func (w *Redis) NewContribution(job string, epoch int64, r record.Range) (*RedisContribution, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	if err := validateRange(r); err != nil {
		return nil, err
	}
	return &RedisContribution{w: w, job: job, epoch: epoch, r: r}, nil
}

func (c *RedisContribution) keys() []string {
	return []string{redisEpochKey(c.job), redisEpochsKey(c.job), redisOffsetsKey(c.job),
		redisContribKey(c.job, c.r), redisContribDeadKey(c.job, c.r)}
}

// DeadLetters stages dls, which must lie in the range.
func (c *RedisContribution) DeadLetters(ctx context.Context, dls []record.DeadLetter) error {
	for len(dls) > 0 && !c.folded {
		args := []any{c.epoch, rangeField(c.r), c.r.From, c.r.To, "0"}
		if !c.fresh {
			args[4] = "1"
		}
		size := 0
		for len(dls) > 0 && size < redisDeadChunkBytes {
			f, v, err := c.encode(&dls[0])
			if err != nil {
				return err
			}
			args = append(args, f, v)
			size += len(v)
			dls = dls[1:]
		}
		n, err := stageDeadScript.Run(ctx, c.w.c, c.keys(), args...).Int64()
		if err != nil {
			return fmt.Errorf("writing dead letters of %v for job %s: %w", c.r, c.job, scriptError(err))
		}
		c.fresh = true
		if n < 0 {
			c.folded = true
			break
		}
		c.staged += n
	}
	return nil
}

// encode is a dead letter's field and value in the range's hashes.
func (c *RedisContribution) encode(d *record.DeadLetter) (string, []byte, error) {
	r := c.r
	if d.Topic != r.Topic || d.Partition != r.Partition || d.Offset < r.From || d.Offset >= r.To {
		return "", nil, fmt.Errorf("writers: dead letter %s/%d@%d is outside range %v", d.Topic, d.Partition, d.Offset, r)
	}
	reason, payload := d.Reason, d.Payload
	if len(payload) > MaxPayloadBytes {
		reason = fmt.Sprintf("%s (payload cut from %d to %d bytes)", reason, len(payload), MaxPayloadBytes)
		payload = payload[:MaxPayloadBytes]
	}
	v, err := json.Marshal(deadLetterJSON{Reason: StoredReason(reason), Payload: payload})
	if err != nil {
		return "", nil, fmt.Errorf("encoding dead letter: %w", err)
	}
	return strconv.FormatInt(d.Offset, 10), v, nil
}

// Totals completes the contribution with per-key totals (repeated keys are
// summed) and the dead letters not staged yet.
func (c *RedisContribution) Totals(ctx context.Context, totals []Total, dls []record.DeadLetter) error {
	type sum struct{ events, amount exact.Int }
	sums := make(map[string]*sum, len(totals))
	for _, t := range totals {
		s := sums[t.Key]
		if s == nil {
			s = &sum{}
			sums[t.Key] = s
		}
		s.events.Add(t.Events)
		s.amount.Add(t.Amount)
	}
	args := make([]any, 0, 6+2*len(sums))
	args = append(args, c.epoch, rangeField(c.r), c.r.From, c.r.To, "m", rangeMark(c.r))
	for k, s := range sums {
		args = append(args, "t:"+k, s.events.String()+","+s.amount.String())
	}
	return c.finish(ctx, args, dls)
}

// finish writes the contribution: args (the script's ARGV so far) and the
// dead letters, inline if none were staged and they are small, else staged
// first.
func (c *RedisContribution) finish(ctx context.Context, args []any, dls []record.DeadLetter) error {
	size := 0
	for i := range dls {
		size += len(dls[i].Payload)
	}
	// Base64 and JSON make the payloads a third larger.
	if c.fresh || size > redisDeadChunkBytes/2 {
		if err := c.DeadLetters(ctx, dls); err != nil {
			return err
		}
		dls = nil
	}
	if c.folded {
		return nil
	}
	for i := range dls {
		f, v, err := c.encode(&dls[i])
		if err != nil {
			return err
		}
		args = append(args, "d:"+f, v)
	}
	if c.fresh {
		args = append(args, "n", c.staged)
	}
	if err := writeContribScript.Run(ctx, c.w.c, c.keys(), args...).Err(); err != nil {
		return fmt.Errorf("writing contribution of %v for job %s: %w", c.r, c.job, scriptError(err))
	}
	return nil
}

// ErrRedisValue means a row of a user-defined job (WriteRowsContribution)
// can't be stored in the Redis hashes: a MergeAdd value that is not an
// integer, a key or value of a type without a text form, a nil, or a row
// of the wrong width. It is the job's error, not
// Redis's: retrying gives the same rows again.
var ErrRedisValue = errors.New("writers: row not storable in Redis")

// RedisRowsKey is the hash holding value column column of a user-defined
// job's table (WriteRowsContribution): field = the row's key
// (RedisRowField), value = the column's value.
func RedisRowsKey(job, table, column string) string { return redisKey(job, "rows", table, column) }

// RedisRowField is the field of a row with key values keys in the rows
// hashes (RedisRowsKey). With one key column it is the value's text;
// with several, each value's text prefixed by its length in bytes and a
// colon, concatenated: ("eu", "2026-11-30") -> "2:eu10:2026-11-30", which
// no other key tuple gives, whatever bytes the values hold. The text of a
// value: a string or []byte as it is, integers and floats in decimal
// (strconv, shortest form for floats), a bool as true/false, a time.Time
// in UTC as RFC 3339 with nanoseconds, a fmt.Stringer by its String.
// Other types and nil are refused (ErrRedisValue).
func RedisRowField(keys []any) (string, error) {
	if len(keys) == 0 {
		return "", fmt.Errorf("%w: a row needs key values", ErrRedisValue)
	}
	if len(keys) == 1 {
		s, ok := redisText(keys[0])
		if !ok {
			return "", fmt.Errorf("%w: key value %v (%T) has no text form", ErrRedisValue, keys[0], keys[0])
		}
		return s, nil
	}
	var b strings.Builder
	for _, k := range keys {
		s, ok := redisText(k)
		if !ok {
			return "", fmt.Errorf("%w: key value %v (%T) has no text form", ErrRedisValue, k, k)
		}
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	return b.String(), nil
}

// redisText is a key's or a MergeReplace value's text (see RedisRowField).
func redisText(v any) (string, bool) {
	if i, ok := values.Int64(v); ok {
		return strconv.FormatInt(i, 10), true
	}
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	case uint64:
		return strconv.FormatUint(x, 10), true
	case uint:
		return strconv.FormatUint(uint64(x), 10), true
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), true
	case bool:
		return strconv.FormatBool(x), true
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), true
	case fmt.Stringer:
		return x.String(), true
	}
	return "", false
}

// redisRowsSuffix is the part of a rows hash's key after mb:{job}:rows:, and
// the part of a contribution field between its prefix and the NUL: the
// table and column are SQL identifiers (Upsert.Validate), so neither holds
// ":" or NUL.
func redisRowsSuffix(table, column string) string { return table + ":" + column }

// WriteRowsContribution is WriteContribution for a user-defined job: range
// r's results are rows of u (key values then value values, in u's order)
// instead of per-key totals. Each value column v of u is a hash
// RedisRowsKey(job, u.Table, v) with a field per row key (RedisRowField);
// the fold (FoldRows) adds the rows' values into it with HINCRBY for
// u.Merge == MergeAdd — values must then be integers, and rows with the same
// key are summed here; sums are exact, past int64 too (see Fold) — or sets them with HSET for MergeReplace (the text
// of the value, see RedisRowField; of rows with the same key, the last
// one's). A row that can't be stored fails the whole call with
// ErrRedisValue, naming the column, and writes nothing. The contribution
// replaces the range's as WriteContribution's does, with the same fencing
// and replay rules.
func (w *Redis) WriteRowsContribution(ctx context.Context, job string, epoch int64, r record.Range, u Upsert, rows [][]any, dls []record.DeadLetter) error {
	c, err := w.NewContribution(job, epoch, r)
	if err != nil {
		return err
	}
	return c.Rows(ctx, u, rows, dls)
}

// Rows completes the contribution with rows of u, as WriteRowsContribution
// writes them, and the dead letters not staged yet. A row that can't be
// stored fails the call with ErrRedisValue before it writes anything (dead
// letters staged before stay staged, invisible, until the range is
// written again).
func (c *RedisContribution) Rows(ctx context.Context, u Upsert, rows [][]any, dls []record.DeadLetter) error {
	r := c.r
	if err := u.Validate(); err != nil {
		return err
	}
	nk, width := len(u.Keys), len(u.Keys)+len(u.Values)
	prefix := "s:"
	if u.Merge == MergeAdd {
		prefix = "a:"
	}
	cols := make([]string, len(u.Values))
	for i, v := range u.Values {
		cols[i] = prefix + redisRowsSuffix(u.Table, v) + "\x00"
	}
	sums := map[string]exact.Int{}
	sets := map[string]string{}
	for _, row := range rows {
		if len(row) != width {
			return fmt.Errorf("%w: a row of %d values for %s, want %d (keys %v then values %v)",
				ErrRedisValue, len(row), u.Table, width, u.Keys, u.Values)
		}
		key, err := RedisRowField(row[:nk])
		if err != nil {
			return fmt.Errorf("%s %v: %w", u.Table, u.Keys, err)
		}
		for i, v := range row[nk:] {
			f := cols[i] + key
			if u.Merge == MergeAdd {
				n, ok := values.Int64(v)
				if !ok {
					return fmt.Errorf("%w: %s.%s is added (MergeAdd) in Redis, which takes integers only; key %q has %v (%T)",
						ErrRedisValue, u.Table, u.Values[i], key, v, v)
				}
				s := sums[f]
				s.Add(n)
				sums[f] = s
				continue
			}
			s, ok := redisText(v)
			if !ok {
				return fmt.Errorf("%w: %s.%s of key %q is %v (%T), which has no text form for Redis",
					ErrRedisValue, u.Table, u.Values[i], key, v, v)
			}
			sets[f] = s
		}
	}
	args := make([]any, 0, 6+2*len(sums)+2*len(sets)+2*len(dls))
	args = append(args, c.epoch, rangeField(r), r.From, r.To, "m", rangeMark(r))
	for f, n := range sums {
		args = append(args, f, n.String())
	}
	for f, s := range sets {
		args = append(args, f, s)
	}
	return c.finish(ctx, args, dls)
}

// redisExactLua defines the fold's exact integer arithmetic on decimal
// strings: isint(s) (a canonical integer of any length, as Redis and
// bigadd write them: no sign on 0, no leading zeros) and bigadd(a, b), the
// exact sum of two such strings, digit by digit (Lua numbers are doubles,
// exact only to 2^53: it never computes in them); and LIMIT, a bound well
// below 2^63 that a double's rounding of a sum can't carry across.
const redisExactLua = `
local LIMIT = 9.2e18
-- isint: a canonical decimal integer of any length, as Redis and
-- bigadd write them (no sign on 0, no leading zeros).
local function isint(s)
  return s == '0' or string.match(s, '^%-?[1-9]%d*$') ~= nil
end
-- addmag, submag and cmpmag take magnitudes (digits, no sign).
local function addmag(a, b)
  local r, carry, i, j = {}, 0, #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local d = carry
    if i > 0 then d = d + string.byte(a, i) - 48; i = i - 1 end
    if j > 0 then d = d + string.byte(b, j) - 48; j = j - 1 end
    carry = 0
    if d >= 10 then d = d - 10; carry = 1 end
    r[#r + 1] = string.char(48 + d)
  end
  return string.reverse(table.concat(r))
end
local function submag(a, b) -- a >= b
  local r, borrow, i, j = {}, 0, #a, #b
  while i > 0 do
    local d = string.byte(a, i) - 48 - borrow
    if j > 0 then d = d - (string.byte(b, j) - 48); j = j - 1 end
    borrow = 0
    if d < 0 then d = d + 10; borrow = 1 end
    r[#r + 1] = string.char(48 + d)
    i = i - 1
  end
  local s = (string.gsub(string.reverse(table.concat(r)), '^0+', ''))
  if s == '' then return '0' end
  return s
end
local function cmpmag(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
local function bigadd(a, b)
  local na, nb = string.sub(a, 1, 1) == '-', string.sub(b, 1, 1) == '-'
  local ma, mb = a, b
  if na then ma = string.sub(a, 2) end
  if nb then mb = string.sub(b, 2) end
  local neg, m
  if na == nb then
    neg, m = na, addmag(ma, mb)
  else
    local c = cmpmag(ma, mb)
    if c == 0 then return '0' end
    if c > 0 then neg, m = na, submag(ma, mb) else neg, m = nb, submag(mb, ma) end
  end
  if neg and m ~= '0' then return '-' .. m end
  return m
end
`

// foldScript: KEYS epoch, epochs, offsets, totals:events, totals:amount,
// plan:parts, then per range its contrib, staged dead letters and dead
// keys, then the rows hashes the contributions may add to (FoldRows); ARGV
// epoch, batchID, then per range its field, from, to.
//
// It runs in two passes so that a failure changes nothing (Redis does not
// undo a script's writes when it fails half-way): the first pass reads and
// checks everything a write could trip over — epochs, plan, offsets, key
// types, stored values — and the second only writes.
//
// Sums are exact integers of any size, stored as their decimal text (which
// is what Redis stores for HINCRBY too): a total never wraps and never
// stops the fold. The first pass follows each summed field with a Lua
// double (exact only to 2^53) just to tell whether its stored value, every
// increment and every intermediate sum stay within LIMIT: then the second
// pass adds with HINCRBY, which does the exact int64 arithmetic, and the
// common case costs what it did before. A field for which that is not
// certain ("big") is summed exactly in decimal strings (bigadd) after the
// first pass, before anything is written, and its sum is set with HSET at
// the end. Lua never does the arithmetic in doubles.
//
// A user-defined job's fields ("a:"/"s:" table:column NUL row-key) go to the
// rows hash KEYS names for table:column; one the caller did not pass is
// refused (MBCONFLICT), not written to an undeclared key.
var foldScript = redis.NewScript(redisFenceLua + redisExactLua + `
local n = (#ARGV - 2) / 3
for i = 1, n do
  local err = fence(KEYS[1], KEYS[2], ARGV[3 * i], ARGV[1], 'fold')
  if err then
    return err
  end
end
local function ishash(k)
  local t = redis.call('TYPE', k)['ok']
  return t == 'hash' or t == 'none'
end
for k = 3, 5 do
  if not ishash(KEYS[k]) then
    return redis.error_reply('MBCORRUPT ' .. KEYS[k] .. ' is not a hash')
  end
end
local rowkeys = {}
for k = 7 + 3 * n, #KEYS do
  if not ishash(KEYS[k]) then
    return redis.error_reply('MBCORRUPT ' .. KEYS[k] .. ' is not a hash')
  end
  local sfx = string.match(KEYS[k], '}:rows:(.+)$')
  if not sfx then
    return redis.error_reply('MBCORRUPT ' .. KEYS[k] .. ' is not a rows key')
  end
  rowkeys[sfx] = KEYS[k]
end
-- rowtarget parses a rows field: its hash and the field in it.
local function rowtarget(ck, f)
  local z = string.find(f, '\0', 3, true)
  if not z then
    return nil, nil, redis.error_reply('MBCORRUPT ' .. ck .. ' has a bad field ' .. f)
  end
  local sfx = string.sub(f, 3, z - 1)
  local hk = rowkeys[sfx]
  if not hk then
    return nil, nil, redis.error_reply('MBCONFLICT ' .. ck .. ' has rows for ' .. sfx .. ', which the fold was not given (fold a user-defined job with FoldRows and its Upsert)')
  end
  return hk, string.sub(f, z + 1), nil
end
-- run[hash][field]: the field's sum so far as a double, only to bound
-- it. big[hash][field]: true for a field whose sum may leave int64 (its
-- stored value, an increment or a running sum past LIMIT); after the first
-- pass, its exact sum in decimal.
local run, big = {}, {}
local nbig = 0
local function account(hk, key, v, ck, f)
  if not isint(v) then
    return redis.error_reply('MBCORRUPT ' .. ck .. ' field ' .. f .. ' = ' .. v)
  end
  local r = run[hk]
  if r == nil then
    r = {}
    run[hk] = r
    big[hk] = {}
  end
  local b = big[hk]
  local cur = r[key]
  if cur == nil then
    local s = redis.call('HGET', hk, key) or '0'
    if not isint(s) then
      return redis.error_reply('MBCORRUPT ' .. hk .. ' field ' .. key .. ' is not an integer')
    end
    cur = tonumber(s)
    if #s > 20 or math.abs(cur) > LIMIT then
      b[key] = true
      nbig = nbig + 1
    end
  end
  local x = tonumber(v)
  cur = cur + x
  r[key] = cur
  if not b[key] and (#v > 20 or math.abs(x) > LIMIT or math.abs(cur) > LIMIT) then
    b[key] = true
    nbig = nbig + 1
  end
  return nil
end
-- addbig adds an increment to a big field's exact sum.
local function addbig(hk, key, v)
  local b = big[hk]
  if b and b[key] then
    b[key] = bigadd(b[key], v)
  end
end
-- add applies an increment: HINCRBY, or nothing for a big field, whose
-- exact sum is set at the end.
local function add(hk, key, v)
  if not big[hk][key] then
    redis.call('HINCRBY', hk, key, v)
  end
end
local todo = {}
for i = 1, n do
  local ck, sk, dk = KEYS[4 + 3 * i], KEYS[5 + 3 * i], KEYS[6 + 3 * i]
  local field, from, to = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
  local logged = redis.call('HGET', KEYS[6], field)
  if not logged then
    return redis.error_reply('MBMISSING no logged plan for ' .. field)
  end
  if logged ~= ARGV[2] .. ' ' .. from .. ' ' .. to then
    return redis.error_reply('MBCONFLICT ' .. field .. ' ' .. from .. '-' .. to .. ' is not the range batch ' .. ARGV[2] .. ' logged for it (the log has "' .. logged .. '")')
  end
  local off = redis.call('HGET', KEYS[3], field)
  if not off then
    return redis.error_reply('MBNOROW no offset for ' .. field)
  end
  if off ~= to then
    if off ~= from then
      return redis.error_reply('MBCONFLICT ' .. field .. ' is at ' .. off .. ', the range is ' .. from .. '-' .. to)
    end
    if redis.call('EXISTS', ck) == 0 then
      return redis.error_reply('MBMISSING no contribution for ' .. field .. ' ' .. from .. '-' .. to)
    end
    if not ishash(ck) or not ishash(sk) or not ishash(dk) then
      return redis.error_reply('MBCORRUPT ' .. ck .. ', ' .. sk .. ' or ' .. dk .. ' is not a hash')
    end
    local staged = redis.call('HGET', ck, 'n') or '0'
    if redis.call('HLEN', sk) ~= tonumber(staged) then
      return redis.error_reply('MBCORRUPT ' .. sk .. ' holds ' .. redis.call('HLEN', sk) .. ' dead letters, the contribution says ' .. staged)
    end
    local kv = redis.call('HGETALL', ck)
    for j = 1, #kv, 2 do
      local f, v = kv[j], kv[j + 1]
      local p = string.sub(f, 1, 2)
      if p == 't:' then
        local c = string.find(v, ',', 1, true)
        if not c then
          return redis.error_reply('MBCORRUPT ' .. ck .. ' field ' .. f .. ' = ' .. v)
        end
        local key = string.sub(f, 3)
        local err = account(KEYS[4], key, string.sub(v, 1, c - 1), ck, f) or account(KEYS[5], key, string.sub(v, c + 1), ck, f)
        if err then
          return err
        end
      elseif p == 'a:' then
        local hk, key, err = rowtarget(ck, f)
        if err then
          return err
        end
        err = account(hk, key, v, ck, f)
        if err then
          return err
        end
      elseif p == 's:' then
        local _, _, err = rowtarget(ck, f)
        if err then
          return err
        end
      elseif p ~= 'd:' and f ~= 'm' and f ~= 'n' then
        return redis.error_reply('MBCORRUPT ' .. ck .. ' has an unknown field ' .. f)
      end
    end
    todo[#todo + 1] = {ck, dk, field, to, kv, sk}
  end
end
-- The exact sums of the big fields (rare: only then a second look at the
-- contributions), still before anything is written.
if nbig > 0 then
  for hk, b in pairs(big) do
    for key in pairs(b) do
      b[key] = redis.call('HGET', hk, key) or '0'
    end
  end
  for _, t in ipairs(todo) do
    local ck, kv = t[1], t[5]
    for j = 1, #kv, 2 do
      local f, v = kv[j], kv[j + 1]
      local p = string.sub(f, 1, 2)
      if p == 't:' then
        local c = string.find(v, ',', 1, true)
        local key = string.sub(f, 3)
        addbig(KEYS[4], key, string.sub(v, 1, c - 1))
        addbig(KEYS[5], key, string.sub(v, c + 1))
      elseif p == 'a:' then
        local hk, key = rowtarget(ck, f)
        addbig(hk, key, v)
      end
    end
  end
end
for _, t in ipairs(todo) do
  local ck, dk, field, to, kv, sk = t[1], t[2], t[3], t[4], t[5], t[6]
  -- One staged dead letter at a time: they may be far larger than the
  -- memory a script should hold at once.
  for _, off in ipairs(redis.call('HKEYS', sk)) do
    redis.call('HSET', dk, off, redis.call('HGET', sk, off))
  end
  redis.call('DEL', sk)
  for j = 1, #kv, 2 do
    local f, v = kv[j], kv[j + 1]
    local p = string.sub(f, 1, 2)
    if p == 't:' then
      local c = string.find(v, ',', 1, true)
      local key = string.sub(f, 3)
      add(KEYS[4], key, string.sub(v, 1, c - 1))
      add(KEYS[5], key, string.sub(v, c + 1))
    elseif p == 'd:' then
      redis.call('HSET', dk, string.sub(f, 3), v)
    elseif p == 'a:' then
      local hk, key = rowtarget(ck, f)
      add(hk, key, v)
    elseif p == 's:' then
      local hk, key = rowtarget(ck, f)
      redis.call('HSET', hk, key, v)
    end
  end
  redis.call('HSET', KEYS[3], field, to)
  redis.call('DEL', ck)
end
for hk, b in pairs(big) do
  for key, x in pairs(b) do
    redis.call('HSET', hk, key, x)
  end
end
return #todo
`)

// Fold adds the contributions of batch batchID's ranges into the totals,
// moves their dead letters into mb:{job}:dead:…, advances their offsets to
// To and deletes the contributions — all in one atomic script, for the
// ranges whose stored offset is still their From. Ranges already at To are
// skipped (folded before: a repeated or replayed fold adds nothing). It
// returns how many ranges it folded.
//
// Each range must be its partition's last logged range (plan:parts), logged
// by batch batchID; passing all of a batch's ranges in one call makes the
// whole batch visible at once. Nothing changes if any range fails:
// offsets.ErrFenced (its partition was claimed with a newer epoch: stop
// writing it), offsets.ErrConflict (an offset is neither From nor To, or a
// range is not what batchID logged for its partition: stop),
// offsets.ErrNoRow (InitOffsets first) or ErrRedisMissing (a partition has
// no logged range, or a contribution is gone).
//
// The script holds Redis for the time it takes, which grows with the keys in
// the batch (about a millisecond per thousand).
func (w *Redis) Fold(ctx context.Context, job string, epoch, batchID int64, ranges []record.Range) (folded int, err error) {
	return w.fold(ctx, job, epoch, batchID, ranges, nil)
}

// FoldRows is Fold for a user-defined job whose contributions were written
// by WriteRowsContribution with u: it also applies their rows to u's hashes
// (RedisRowsKey), in the same atomic step as the offsets. A contribution
// with rows of another table or column than u's is refused
// (offsets.ErrConflict) and nothing changes.
func (w *Redis) FoldRows(ctx context.Context, job string, epoch, batchID int64, ranges []record.Range, u Upsert) (folded int, err error) {
	if err := u.Validate(); err != nil {
		return 0, err
	}
	rows := make([]string, len(u.Values))
	for i, v := range u.Values {
		rows[i] = RedisRowsKey(job, u.Table, v)
	}
	return w.fold(ctx, job, epoch, batchID, ranges, rows)
}

func (w *Redis) fold(ctx context.Context, job string, epoch, batchID int64, ranges []record.Range, rows []string) (folded int, err error) {
	if err := checkJob(job); err != nil {
		return 0, err
	}
	if err := validateRanges(ranges); err != nil {
		return 0, err
	}
	keys := make([]string, 0, 6+3*len(ranges)+len(rows))
	keys = append(keys, redisEpochKey(job), redisEpochsKey(job), redisOffsetsKey(job),
		RedisEventsKey(job), RedisAmountKey(job), redisPlanPartsKey(job))
	args := make([]any, 0, 2+3*len(ranges))
	args = append(args, epoch, batchID)
	for _, r := range ranges {
		keys = append(keys, redisContribKey(job, r), redisContribDeadKey(job, r), redisDeadKey(job, r.Topic, r.Partition))
		args = append(args, rangeField(r), r.From, r.To)
	}
	keys = append(keys, rows...)
	n, err := foldScript.Run(ctx, w.c, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("folding batch %d of job %s: %w", batchID, job, scriptError(err))
	}
	return n, nil
}

// Rows reads a user-defined job's hash of value column column of table
// (RedisRowsKey): row key (RedisRowField) -> value. It reads in steps, not
// as one snapshot: call it when the job is idle, or read the hash in a
// MULTI yourself.
func (w *Redis) Rows(ctx context.Context, job, table, column string) (map[string]string, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	if err := (Upsert{Table: table, Keys: []string{column}, Values: []string{column}}).Validate(); err != nil {
		return nil, err
	}
	key := RedisRowsKey(job, table, column)
	out := map[string]string{}
	it := w.c.HScan(ctx, key, 0, "", 1000).Iterator()
	var field string
	for i := 0; it.Next(ctx); i++ {
		if i%2 == 0 {
			field = it.Val()
			continue
		}
		out[field] = it.Val()
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	return out, nil
}

// Totals sums the users' totals hashes: all events, all amounts (exact:
// a key's amount may pass int64), and how many keys. It reads in steps,
// not as one snapshot: call it when the job is idle.
func (w *Redis) Totals(ctx context.Context, job string) (events int64, amount *big.Int, keys int64, err error) {
	if err := checkJob(job); err != nil {
		return 0, nil, 0, err
	}
	ev, keys, err := w.sumHash(ctx, RedisEventsKey(job))
	if err != nil {
		return 0, nil, 0, err
	}
	events, ok := ev.Int64()
	if !ok {
		return 0, nil, 0, fmt.Errorf("reading %s: the events of job %s add up to %v, more than an int64 holds", RedisEventsKey(job), job, ev)
	}
	am, _, err := w.sumHash(ctx, RedisAmountKey(job))
	if err != nil {
		return 0, nil, 0, err
	}
	return events, am.Big(), keys, nil
}

// sumHash adds up a hash's values, integers of any size.
func (w *Redis) sumHash(ctx context.Context, key string) (sum exact.Int, n int64, err error) {
	it := w.c.HScan(ctx, key, 0, "", 1000).Iterator()
	for i := 0; it.Next(ctx); i++ {
		if i%2 == 0 {
			continue // a field
		}
		v, err := exact.Parse(it.Val())
		if err != nil {
			return sum, 0, fmt.Errorf("reading %s: value %q is not an integer", key, it.Val())
		}
		sum.AddInt(v)
		n++
	}
	if err := it.Err(); err != nil {
		return sum, 0, fmt.Errorf("reading %s: %w", key, err)
	}
	return sum, n, nil
}

// DeadLetterCount counts the job's folded dead letters (those of every
// partition the job has an offset for).
func (w *Redis) DeadLetterCount(ctx context.Context, job string) (int64, error) {
	if err := checkJob(job); err != nil {
		return 0, err
	}
	parts, err := w.c.HKeys(ctx, redisOffsetsKey(job)).Result()
	if err != nil {
		return 0, fmt.Errorf("counting dead letters of job %s: %w", job, err)
	}
	cmds := make([]*redis.IntCmd, 0, len(parts))
	_, err = w.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, f := range parts {
			topic, part, _ := strings.Cut(f, "/")
			cmds = append(cmds, p.HLen(ctx, redisKey(job, "dead", topic, part)))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting dead letters of job %s: %w", job, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// scriptError turns the scripts' error replies into the package sentinels;
// other errors pass unchanged.
func scriptError(err error) error {
	var re redis.Error
	if !errors.As(err, &re) {
		return err
	}
	code, msg, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "MBFENCED":
		return fmt.Errorf("%w: %s", offsets.ErrFenced, msg)
	case "MBCONFLICT":
		return fmt.Errorf("%w: %s", offsets.ErrConflict, msg)
	case "MBNOROW":
		return fmt.Errorf("%w: %s", offsets.ErrNoRow, msg)
	case "MBMISSING":
		return fmt.Errorf("%w: %s", ErrRedisMissing, msg)
	}
	return err
}

// IsRedisRetryable reports whether a failed Redis call may be made again.
// That includes a connection lost after the command was sent, whose outcome
// is unknown: every Redis method can be repeated safely (see Redis). Server
// states that pass (LOADING, TRYAGAIN, BUSY, a failover in progress) are
// retryable; fencing, conflicts, missing keys, script errors and the
// caller's own cancellation are not.
func IsRedisRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed) {
		return false
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		return redis.IsLoadingError(err) || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) ||
			redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) || redis.IsMaxClientsError(err) ||
			redis.HasErrorPrefix(err, "BUSY ")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// RedisPosition is a partition's stored progress (Positions).
type RedisPosition struct {
	Partition  int32
	NextOffset int64
	// Epoch is the partition's own epoch (mb:{job}:epochs), else the
	// job's (mb:{job}:epoch): the epoch a write must not be older than.
	Epoch int64
	// Logged is the partition's last logged range (plan:parts), if any;
	// Pending says it is not folded yet (the offset is still at its From):
	// the job's next run finishes it first.
	Logged  *PlannedRange
	Pending bool
}

// Positions returns the stored progress of the job's partitions of topic
// that have an offset, by partition, read as one snapshot (MULTI). It is
// for inspection (`microbatch offsets show`).
func (w *Redis) Positions(ctx context.Context, job, topic string) (map[int32]RedisPosition, error) {
	if err := checkJob(job); err != nil {
		return nil, err
	}
	if !record.ValidTopic(topic) {
		return nil, fmt.Errorf("writers: bad topic name %q", topic)
	}
	var offs, epochs, logged *redis.MapStringStringCmd
	var jobEpoch *redis.StringCmd
	if _, err := w.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		offs = p.HGetAll(ctx, redisOffsetsKey(job))
		epochs = p.HGetAll(ctx, redisEpochsKey(job))
		jobEpoch = p.Get(ctx, redisEpochKey(job))
		logged = p.HGetAll(ctx, redisPlanPartsKey(job))
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading positions of job %s: %w", job, err)
	}
	je, _ := strconv.ParseInt(jobEpoch.Val(), 10, 64)
	out := make(map[int32]RedisPosition)
	for f, v := range offs.Val() {
		t, ps, ok := strings.Cut(f, "/")
		if !ok || t != topic {
			continue
		}
		part, perr := strconv.ParseInt(ps, 10, 32)
		off, oerr := strconv.ParseInt(v, 10, 64)
		if perr != nil || oerr != nil {
			return nil, fmt.Errorf("reading positions of job %s: bad offset entry %q = %q", job, f, v)
		}
		pos := RedisPosition{Partition: int32(part), NextOffset: off, Epoch: je}
		if e, ok := epochs.Val()[f]; ok {
			if pos.Epoch, oerr = strconv.ParseInt(e, 10, 64); oerr != nil {
				return nil, fmt.Errorf("reading positions of job %s: bad epoch entry %q = %q", job, f, e)
			}
		}
		if entry, ok := logged.Val()[f]; ok {
			pr := PlannedRange{Range: record.Range{Topic: topic, Partition: int32(part)}}
			if _, err := fmt.Sscanf(entry, "%d %d %d", &pr.BatchID, &pr.From, &pr.To); err != nil {
				return nil, fmt.Errorf("reading positions of job %s: bad plan entry %s = %q", job, f, entry)
			}
			pos.Logged, pos.Pending = &pr, off == pr.From
		}
		out[pos.Partition] = pos
	}
	return out, nil
}

// resetScript: KEYS epoch, epochs, offsets, plan:parts, then the
// contribution keys to delete; ARGV per partition its field, new offset and
// its plan:parts entry as read before ("" if none). Returns the new epoch,
// then each partition's old offset ("" if none).
var resetScript = redis.NewScript(`
local n = #ARGV / 3
for i = 0, n - 1 do
  local field, want = ARGV[3 * i + 1], ARGV[3 * i + 3]
  if (redis.call('HGET', KEYS[4], field) or '') ~= want then
    return redis.error_reply('MBCONFLICT the logged range of ' .. field .. ' changed during the reset: is the job running?')
  end
end
local s = string.format('%d', tonumber(redis.call('GET', KEYS[1]) or '0') + 1)
redis.call('SET', KEYS[1], s)
local out = {s}
for i = 0, n - 1 do
  local field, to = ARGV[3 * i + 1], ARGV[3 * i + 2]
  out[#out + 1] = redis.call('HGET', KEYS[3], field) or ''
  redis.call('HSET', KEYS[3], field, to)
  redis.call('HSET', KEYS[2], field, s)
  redis.call('HDEL', KEYS[4], field)
end
for k = 5, #KEYS do
  redis.call('DEL', KEYS[k])
end
return out
`)

// ResetOffsets moves partitions of a stopped job's topic to the offsets in
// to, in one atomic script, and returns the new epoch and the changes,
// sorted by partition. It is `microbatch offsets reset`:
//
//   - the offsets are set (created if missing);
//   - the job's epoch is raised by one and stamped on the partitions, so
//     that a process of the old run still alive somewhere is fenced on
//     them (offsets.ErrFenced), and the next run claims above it;
//   - the partitions' logged ranges (plan:parts) are dropped, with the
//     contribution of one not folded yet. Otherwise the next run would
//     finish a range planned before the reset (PendingRanges returns it if
//     the new offset happens to be its From), and LogPlan would refuse
//     new ranges while it is pending.
//
// The totals, dead letters and the batch counter stay: a rewind counts the
// records again (dead letters are keyed by offset and are overwritten).
// If a partition's logged range changed between the read and the script
// (the job is running after all), nothing changes and the error is
// offsets.ErrConflict.
func (w *Redis) ResetOffsets(ctx context.Context, job, topic string, to map[int32]int64) (int64, []offsets.Change, error) {
	if err := checkJob(job); err != nil {
		return 0, nil, err
	}
	if !record.ValidTopic(topic) {
		return 0, nil, fmt.Errorf("writers: bad topic name %q", topic)
	}
	parts := make([]int32, 0, len(to))
	for p, off := range to {
		if p < 0 || off < 0 {
			return 0, nil, fmt.Errorf("writers: bad target %d for partition %d", off, p)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return 0, nil, fmt.Errorf("writers: no partitions to reset")
	}
	slices.Sort(parts)
	fields := make([]string, len(parts))
	for i, p := range parts {
		fields[i] = rangeField(record.Range{Topic: topic, Partition: p})
	}
	logged, err := w.c.HMGet(ctx, redisPlanPartsKey(job), fields...).Result()
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: %w", job, err)
	}
	keys := []string{redisEpochKey(job), redisEpochsKey(job), redisOffsetsKey(job), redisPlanPartsKey(job)}
	args := make([]any, 0, 3*len(parts))
	for i, p := range parts {
		entry, _ := logged[i].(string)
		if entry != "" {
			r := record.Range{Topic: topic, Partition: p}
			var id int64
			if _, err := fmt.Sscanf(entry, "%d %d %d", &id, &r.From, &r.To); err != nil {
				return 0, nil, fmt.Errorf("resetting offsets of job %s: bad plan entry %s = %q", job, fields[i], entry)
			}
			keys = append(keys, redisContribKey(job, r), redisContribDeadKey(job, r))
		}
		args = append(args, fields[i], to[p], entry)
	}
	res, err := resetScript.Run(ctx, w.c, keys, args...).StringSlice()
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: %w", job, scriptError(err))
	}
	if len(res) != 1+len(parts) {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: the script answered %d values, want %d", job, len(res), 1+len(parts))
	}
	epoch, err := strconv.ParseInt(res[0], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("resetting offsets of job %s: bad epoch %q", job, res[0])
	}
	changes := make([]offsets.Change, len(parts))
	for i, p := range parts {
		changes[i] = offsets.Change{Partition: p, New: to[p]}
		if old := res[1+i]; old != "" {
			changes[i].HadRow = true
			if changes[i].Old, err = strconv.ParseInt(old, 10, 64); err != nil {
				return 0, nil, fmt.Errorf("resetting offsets of job %s: bad old offset %s = %q", job, fields[i], old)
			}
		}
	}
	return epoch, changes, nil
}
