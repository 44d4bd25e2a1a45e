//go:build !unix

package strategies

import "os"

// tryLock: no flock here, so no default instance id; members join with a
// dynamic id (set Config.Group.InstanceID for fast restarts).
func tryLock(*os.File) (bool, error) { return false, errNoLocks }
