// Command collswitch fails when production Go code of this module (test
// files, testdata and tools/ left out) has more than -max switch
// statements over sdk.Collective values, and prints where they are. What
// a collective is belongs in sdk's table of collectives
// (sdk/colltable.go), and which method runs it in sdk.Dispatch and core's
// runners; `make lint` runs it so that copies do not come back.
//
// A switch counts when one of its case expressions names a collective:
// sdk.AllReduce ... sdk.Barrier (bare names inside package sdk).
//
// The ones left (issue 22 allows 5; `make lint` passes -max 2, so no third
// comes back): sdk.Dispatch (sdk/collective.go), which turns a collective
// into the communicator method that runs it, and the plan executor's vendor
// steps (vendorStep, core/internal/executor/step.go), which run a SendRecv
// step as a group of the library. Everything else reads a table: sdk's
// (sdk/colltable.go), sched's of how each collective's plans are built
// (internal/sched/colls.go), the reference's deliveries
// (conformance/reference/reference.go) and the suite's levels
// (conformance/suite/cases.go).
//
//	go run ./tools/collswitch [-max 5] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"os"

	"github.com/flagcx/flagcx-go/tools/internal/gosrc"
)

// collectives are sdk.Collective's values (sdk/collective.go).
var collectives = map[string]bool{
	"AllReduce": true, "Reduce": true, "Broadcast": true, "AllGather": true, "ReduceScatter": true,
	"AlltoAll": true, "AlltoAllv": true, "Gather": true, "Scatter": true, "SendRecv": true, "Barrier": true,
}

func main() {
	limit := flag.Int("max", 5, "most switches over sdk.Collective allowed")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	found, err := scan(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "collswitch:", err)
		os.Exit(2)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	if len(found) > *limit {
		fmt.Fprintf(os.Stderr, "collswitch: %d switches over sdk.Collective, at most %d allowed: read sdk's table of collectives (sdk/colltable.go) or use sdk.Dispatch\n", len(found), *limit)
		os.Exit(1)
	}
}

// scan returns "file:line: switch over sdk.Collective" for every such
// switch under root.
func scan(root string) ([]string, error) {
	var found []string
	err := gosrc.Walk(root, []string{"tools"}, func(fset *token.FileSet, f *ast.File) error {
		inSDK := f.Name.Name == "sdk"
		ast.Inspect(f, func(n ast.Node) bool {
			if sw, ok := n.(*ast.SwitchStmt); ok && overCollective(sw, inSDK) {
				found = append(found, fmt.Sprintf("%s: switch over sdk.Collective", fset.Position(sw.Pos())))
			}
			return true
		})
		return nil
	})
	return found, err
}

// overCollective reports whether a case of sw names a collective.
func overCollective(sw *ast.SwitchStmt, inSDK bool) bool {
	hit := false
	for _, st := range sw.Body.List {
		for _, e := range st.(*ast.CaseClause).List {
			ast.Inspect(e, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok && id.Name == "sdk" && collectives[x.Sel.Name] {
						hit = true
					}
					return false
				case *ast.Ident:
					if inSDK && collectives[x.Name] {
						hit = true
					}
				}
				return true
			})
		}
	}
	return hit
}
