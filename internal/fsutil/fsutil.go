// Package fsutil holds file-system helpers shared by the file-based
// writers and checkpoint stores.
package fsutil

import "os"

// SyncDir fsyncs a directory, making renames and creations in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
