package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/alecthomas/kong"

	"github.com/flagcx/flagcx-go/cmd/flagcx/internal/plot"
)

func init() {
	addCommand("plot", "Draw bus bandwidth and time against message size from flagcx bench --json files, one line per file, as an SVG.", &plotCmd{})
}

type plotCmd struct {
	Files      []string `arg:"" name:"results" placeholder:"[LABEL=]FILE" help:"JSON files written by flagcx bench --json; LABEL= names a file's line in the legend (default: the file name)."`
	Output     string   `short:"o" name:"output" default:"plot.svg" placeholder:"FILE" help:"SVG to write: bus bandwidth above, time (log scale) below."`
	Collective string   `name:"collective" placeholder:"NAME" help:"Plot this collective of files that hold several (flagcx bench all)."`
	Datatype   string   `name:"datatype" short:"d" placeholder:"TYPE" help:"Plot this data type of files that hold several (-d all)."`
	RedOp      string   `name:"redop" placeholder:"OP" help:"Plot this reduction of files that hold several (-o all)."`
	InPlace    bool     `name:"in-place" help:"Plot the in-place half of each row instead of the out-of-place one."`
}

func (c *plotCmd) Run(ctx *kong.Context) error {
	o := plot.Options{Collective: c.Collective, Datatype: c.Datatype, RedOp: c.RedOp, InPlace: c.InPlace}
	var series []plot.Series
	for _, arg := range c.Files {
		s, err := plot.Load(arg, o)
		if err != nil {
			return err
		}
		series = append(series, s)
	}
	// Drawn in memory first, so that a failed plot leaves no partial file.
	var b bytes.Buffer
	if err := plot.WriteSVG(&b, series, c.InPlace); err != nil {
		return err
	}
	if err := os.WriteFile(c.Output, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-o/--output: %w: give a file in a directory that exists and that you may write to", err)
	}
	_, err := fmt.Fprintf(ctx.Stdout, "wrote %s (%d line(s): bus bandwidth and time against message size)\n", c.Output, len(series))
	return err
}
