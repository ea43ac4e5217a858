package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcp-warden/mcp-warden/sandbox"
)

func sandboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Inspect server confinement on this machine",
	}
	cmd.AddCommand(sandboxCheckCommand())
	return cmd
}

func sandboxCheckCommand() *cobra.Command {
	var (
		require bool
		network string
		minABI  int
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Start a test server confined and print each protection, available or not (with the kernel's reason), and the resulting level",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			prof := sandbox.Profile{Network: sandbox.Network(network), MinLandlockABI: minABI}
			if err := prof.Validate(); err != nil {
				return err
			}
			r, err := sandbox.Check(ctx, prof)
			if err != nil {
				return err
			}
			if err := r.Write(cmd.OutOrStdout()); err != nil {
				return err
			}
			if require && r.Confinement.Level != sandbox.LevelStrong {
				return fmt.Errorf("confinement level %s, not strong: a profile with mode: require would refuse every server", r.Confinement.Level)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&require, "require", false, "exit with status 1 unless the level is strong")
	cmd.Flags().StringVar(&network, "network", "none", "network of the test server: none or host")
	cmd.Flags().IntVar(&minABI, "min-landlock-abi", 1, "lowest Landlock ABI counted as filesystem confinement")
	return cmd
}
