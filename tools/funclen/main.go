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
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			first, last := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := last.Line - first.Line; n > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s spans %d lines", path, first.Line, fn.Name.Name, n))
			}
		}
		return nil
	})
	return long, err
}
