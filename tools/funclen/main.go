// Command funclen fails when a non-test Go function of this module is longer
// than -max lines (last line minus first line of its declaration). `make
// lint` runs it, so a long function cannot come back unnoticed.
//
//	go run ./tools/funclen [-max 100] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"os"

	"github.com/flagcx/flagcx-go/tools/internal/gosrc"
)

func main() {
	limit := flag.Int("max", 100, "most lines a function may span")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	long, err := scan(root, *limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	for _, l := range long {
		fmt.Println(l)
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d functions over %d lines: split them along their steps\n", len(long), *limit)
		os.Exit(1)
	}
}

// scan returns "file:line: name spans N lines" for every function under root
// (test files, testdata and hidden directories left out) longer than limit.
func scan(root string, limit int) ([]string, error) {
	var long []string
	err := gosrc.Walk(root, nil, func(fset *token.FileSet, f *ast.File) error {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			first, last := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := last.Line - first.Line; n > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s spans %d lines", first.Filename, first.Line, fn.Name.Name, n))
			}
		}
		return nil
	})
	return long, err
}
