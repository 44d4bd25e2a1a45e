package redissink

import (
	_ "embed" // the Lua scripts

	"github.com/redis/go-redis/v9"
)

// The scripts' helpers, prepended to the scripts that call them.
var (
	//go:embed fence.lua
	fenceLua string
	//go:embed exact.lua
	exactLua string
	//go:embed hset.lua
	hsetLua string
	//go:embed check_contribution.lua
	checkContributionLua string
)

var (
	//go:embed claim.lua
	claimLua string
	//go:embed claim_partitions.lua
	claimPartitionsLua string
	//go:embed next_batch.lua
	nextBatchLua string
	//go:embed log_plan.lua
	logPlanLua string
	//go:embed write_contribution.lua
	writeContributionLua string
	//go:embed stage_dead.lua
	stageDeadLua string
	//go:embed fold.lua
	foldLua string
	//go:embed reset.lua
	resetLua string
)

// The scripts; each file's header names its KEYS and ARGV.
var (
	claimScript           = redis.NewScript(claimLua)
	claimPartitionsScript = redis.NewScript(claimPartitionsLua)
	nextBatchScript       = redis.NewScript(nextBatchLua)
	logPlanScript         = redis.NewScript(fenceLua + logPlanLua)
	writeContribScript    = redis.NewScript(fenceLua + hsetLua + checkContributionLua + writeContributionLua)
	stageDeadScript       = redis.NewScript(fenceLua + hsetLua + checkContributionLua + stageDeadLua)
	foldScript            = redis.NewScript(fenceLua + exactLua + foldLua)
	resetScript           = redis.NewScript(resetLua)
)

// plansKept is how many batch ids back LogPlan keeps plan:{id} keys. They
// are there for inspection and LastPlan: replays take their ranges from
// plan:parts, which holds every partition's last logged range however old.
const plansKept = 100

// deadChunkBytes bounds the encoded dead letters of one script call: a
// contribution's dead letters beyond it are staged in calls of about this
// size (Contribution), so neither this process nor Redis holds them all in
// one request.
const deadChunkBytes = 4 << 20
