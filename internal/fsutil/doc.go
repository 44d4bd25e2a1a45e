// Package fsutil holds file-system helpers shared by the file-based
// writers and checkpoint stores.
package fsutil
