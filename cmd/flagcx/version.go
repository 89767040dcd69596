package main

import (
	"fmt"
	"runtime"

	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

func init() {
	addCommand("version", "Print the flagcx, Go and plugin ABI versions.", &versionCmd{})
}

type versionCmd struct{}

func (versionCmd) Run(ctx *kong.Context) error {
	_, err := fmt.Fprintf(ctx.Stdout, "flagcx version %s\ngo version %s %s/%s\nplugin ABI version %d\n",
		core.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, sdk.PluginABIVersion)
	return err
}
