package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/microbatch/microbatch/internal/devbroker"
)

func brokerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the embedded dev Kafka broker (kfake) until SIGTERM",
		Args:  cobra.NoArgs,
	}
	fs := cmd.Flags()
	addConfigFlag(fs)
	fs.String("listen", "127.0.0.1:9092", "address to listen on")
	fs.StringSlice("topic", nil, "topic to create at start (repeatable or comma list)")
	fs.Int32("partitions", 4, "partitions of --topic and of auto-created topics")
	fs.String("data-dir", "", "directory to persist the log in across restarts (empty: memory only)")
	cmd.RunE = classified(func(cmd *cobra.Command, _ []string) error {
		s, err := loadSettings(cmd)
		if err != nil {
			return err
		}
		parts, err := s.partitions("partitions")
		if err != nil {
			return err
		}
		b, err := devbroker.Start(devbroker.Options{
			Listen:     s.str("listen"),
			Topics:     s.list("topic"),
			Partitions: parts,
			DataDir:    s.str("data-dir"),
		})
		if err != nil {
			return err
		}
		fmt.Printf("dev broker listening on %s\n", strings.Join(b.Addrs(), ","))
		<-cmd.Context().Done()
		b.Close()
		fmt.Println("dev broker stopped")
		return nil
	})
	return cmd
}
