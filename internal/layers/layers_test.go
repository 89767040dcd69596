package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/flagcx/flagcx-go"

// TestLayers: every package of the module has a place in order, and
// imports only packages placed before it.
func TestLayers(t *testing.T) {
	place := map[string]int{}
	for _, l := range order {
		for _, p := range l.pkgs {
			_, dup := place[p]
			require.False(t, dup, "%s is listed twice", p)
			place[p] = len(place)
		}
	}
	pkgs := listPackages(t)
	require.NotEmpty(t, pkgs)
	for _, p := range pkgs {
		at, ok := place[p.path]
		require.True(t, ok, "package %s has no place in layers.order: add it to the layer it belongs to (internal/layers/layers.go)", p.path)
		for _, imp := range p.imports {
			from, ok := place[imp]
			require.True(t, ok, "%s imports %s, which has no place in layers.order", p.path, imp)
			require.Less(t, from, at, "%s imports %s, which layers.order places above it: an arrow up the layers (see docs/architecture.md)", p.path, imp)
			for _, a := range apart {
				require.False(t, under(p.path, a.from) && strings.HasPrefix(imp, a.to), "%s imports %s: %s", p.path, imp, a.why)
			}
		}
	}
}

// TestLayersRefusesAnArrowUp: the check above fails for an import that
// points up (sdk importing core), so it can catch one.
func TestLayersRefusesAnArrowUp(t *testing.T) {
	place := map[string]int{}
	for _, l := range order {
		for _, p := range l.pkgs {
			place[p] = len(place)
		}
	}
	require.Greater(t, place["core"], place["sdk"])
	require.Greater(t, place["launch"], place["core"], "launch starts communicators: it sits above core")
	require.Greater(t, place["sdk"], place["internal/base/env"], "sdk's loaders read the environment: env sits below sdk")
}

// TestApartCatchesATransport: the rule of apart holds for core's
// packages and not for the mesh itself.
func TestApartCatchesATransport(t *testing.T) {
	for _, tc := range []struct {
		pkg, imp string
		refused  bool
	}{
		{"core", "internal/hostnet/shm", true},
		{"core/internal/hostcomm", "internal/hostnet/tcp", true},
		{"core", "internal/hostnet", false},
		{"internal/hostnet", "internal/hostnet/shm", false},
		{"corex", "internal/hostnet/shm", false},
	} {
		refused := false
		for _, a := range apart {
			refused = refused || (under(tc.pkg, a.from) && strings.HasPrefix(tc.imp, a.to))
		}
		require.Equal(t, tc.refused, refused, "%s -> %s", tc.pkg, tc.imp)
	}
}

// under: pkg is dir or a package below it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

type pkg struct {
	path    string
	imports []string
}

// listPackages runs go list over the module: each package's path and its
// imports inside the module (tests' imports aside), relative to it.
func listPackages(t *testing.T) []pkg {
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		rel := pkg{path: strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")}
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				rel.imports = append(rel.imports, strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		pkgs = append(pkgs, rel)
	}
	return pkgs
}
