package strategies

import (
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestGroupMembersWaitsForBusyCoordinator: a coordinator that is still
// loading the group's offsets (what a broker answers for a while after it
// starts) is asked again, so that a dry run or a newcomer check right
// after a broker start reads the group instead of failing. CI met this:
// `run --dry-run` exited 1 with "The coordinator is still loading offsets".
func TestGroupMembersWaitsForBusyCoordinator(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const busyAnswers = 3
	var calls atomic.Int32
	c.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if calls.Add(1) > busyAnswers {
			return nil, nil, false // the broker answers as it would
		}
		r := req.(*kmsg.DescribeGroupsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, kerr.CoordinatorLoadInProgress.Code
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
	client, err := sarama.NewClient(c.ListenAddrs(), kafkautil.Config("microbatch-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	members, err := GroupMembers(client, "g")
	if err != nil {
		t.Fatalf("GroupMembers while the coordinator was loading: %v", err)
	}
	if len(members) != 0 || calls.Load() <= busyAnswers {
		t.Fatalf("members %v after %d DescribeGroups; want none after more than %d", members, calls.Load(), busyAnswers)
	}
}
