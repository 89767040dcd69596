package testkit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/sdk"
)

func TestMain(m *testing.M) {
	ServeWorker()
	os.Exit(m.Run())
}

func init() {
	Worker("testkit-echo", func(r Rank) (any, error) {
		switch os.Getenv("TESTKIT_TEST_MODE") {
		case "fail":
			if r.Rank == 1 {
				return nil, errors.New("rank 1 gives up")
			}
		case "exit":
			if r.Rank == 1 {
				_ = r.Save(echo{Rank: r.Rank, Extra: "saved before exiting"})
				os.Exit(0)
			}
		}
		return echo{Rank: r.Rank, N: r.N, ID: string(r.ID), Extra: os.Getenv("TESTKIT_TEST_EXTRA")}, nil
	})
}

type echo struct {
	Rank, N   int
	ID, Extra string
}

// recorder is a testing.TB that records instead of ending the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		name, ci string
		need     Need
		fails    bool
	}{
		{"a build, outside CI", "", Built, false},
		{"a build, CI=false", "false", Built, false},
		{"a build, CI=true", "true", Built, true},
		{"a build, CI=1", "1", Built, true},
		{"a machine without vendor software, CI=true", "true", NoVendorSoftware, true},
		{"a real GPU, outside CI", "", RealGPU, false},
		{"a real GPU, CI=true", "true", RealGPU, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvCI, tc.ci)
			r := &recorder{TB: t}
			Skip(r, tc.need, "%s is missing", "x")
			if tc.fails {
				require.Empty(t, r.skipped)
				require.Contains(t, r.failed, "needs "+tc.need.What+": x is missing")
				require.Contains(t, r.failed, "CI must provide this")
			} else {
				require.Empty(t, r.failed)
				require.Contains(t, r.skipped, "needs "+tc.need.What+": x is missing")
				if tc.need.Fix != "" {
					require.Contains(t, r.skipped, tc.need.Fix)
				}
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Run("every rank reports", func(t *testing.T) {
		res := Run[echo](t, Spec{Worker: "testkit-echo", N: 3, ID: []byte("id!"), Env: []string{"TESTKIT_TEST_EXTRA=all"},
			PerRank: func(r int) []string {
				if r == 2 {
					return []string{"TESTKIT_TEST_EXTRA=two"}
				}
				return nil
			}})
		require.Equal(t, []echo{{0, 3, "id!", "all"}, {1, 3, "id!", "all"}, {2, 3, "id!", "two"}},
			[]echo{res[0].Report, res[1].Report, res[2].Report})
	})
	t.Run("ranks left out", func(t *testing.T) {
		res := Run[echo](t, Spec{Worker: "testkit-echo", N: 3, Skip: func(r int) bool { return r == 1 }})
		require.Equal(t, echo{}, res[1].Report)
		require.Equal(t, 2, res[2].Report.Rank)
	})
	t.Run("a rank that saves and exits", func(t *testing.T) {
		res := Run[echo](t, Spec{Worker: "testkit-echo", N: 2, Env: []string{"TESTKIT_TEST_MODE=exit"}})
		require.Equal(t, "saved before exiting", res[1].Report.Extra)
	})
	t.Run("a failing rank fails the test with its output", func(t *testing.T) {
		r := &failRecorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			Run[echo](r, Spec{Worker: "testkit-echo", N: 2, Env: []string{"TESTKIT_TEST_MODE=fail"}})
		}()
		require.Contains(t, r.msg, "rank 1 of worker testkit-echo")
		require.Contains(t, r.msg, "rank 1 gives up")
	})
	t.Run("an unknown worker", func(t *testing.T) {
		r := &failRecorder{TB: t}
		func() {
			defer func() { _ = recover() }()
			Run[echo](r, Spec{Worker: "no-such-worker", N: 1})
		}()
		require.Contains(t, r.msg, `no worker "no-such-worker" in this test binary`)
	})
}

// failRecorder records require's failure and stops the caller.
type failRecorder struct {
	testing.TB
	msg string
}

func (r *failRecorder) Helper() {}
func (r *failRecorder) Errorf(f string, a ...any) {
	if r.msg == "" {
		r.msg = fmt.Sprintf(f, a...)
	}
}
func (r *failRecorder) FailNow() { panic("stop") }

func TestInFreshProcess(t *testing.T) {
	InFreshProcess(t, func(t *testing.T) {
		require.Equal(t, t.Name(), os.Getenv(EnvFresh), "the body runs in the fresh process, never here")
	})
}

func TestInFreshProcessSubtest(t *testing.T) {
	t.Run("a sub test (with spaces)", func(t *testing.T) {
		InFreshProcess(t, func(t *testing.T) {
			require.Equal(t, "TestInFreshProcessSubtest/a_sub_test_(with_spaces)", os.Getenv(EnvFresh))
		})
	})
}

func TestInFreshProcessSkips(t *testing.T) {
	var skipped bool
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		InFreshProcess(t, func(t *testing.T) {
			t.Skip("deliberately: this checks that a skip in the fresh process is a skip here")
		})
	})
	require.True(t, skipped, "a skip in the fresh process is a skip here")
}

func TestVendorTable(t *testing.T) {
	var names []string
	for _, v := range Vendors {
		names = append(names, v.Name)
		require.Equal(t, v, Lookup(t, v.Name))
		require.GreaterOrEqual(t, len(v.Libraries), 2, v.Name)
		require.Equal(t, "runtime", v.Libraries[0].Role, v.Name)
		require.Equal(t, "ccl", v.Libraries[1].Role, v.Name)
		for _, e := range v.Emulators() {
			require.True(t, slices.IsSorted(e.Exports), "%s %s: exports sorted", v.Name, e.File)
			require.NotEmpty(t, e.Soname)
		}
		for _, l := range v.Libraries {
			require.Contains(t, l.EnvVar, "FLAGCX_")
			require.Equal(t, l.Sonames[0], l.Soname())
		}
		require.Equal(t, filepath.Join("r", "build", "vendorsim", v.Name), v.EmulatorDir("r"))
	}
	require.Equal(t, []string{"nvidia", "kunlunxin", "cambricon", "metax"}, names)
}

func TestValues(t *testing.T) {
	require.Equal(t, []byte{0x00, 0x3c, 0x00, 0xc0}, Encode(sdk.Float16, 2, func(i int) float64 { return []float64{1, -2}[i] }))
	require.Equal(t, []byte{0x80, 0x3f}, Encode(sdk.Bfloat16, 1, func(int) float64 { return 1 }))
	require.Panics(t, func() { F16Bits(1.0 / 3) })
	require.Panics(t, func() { BF16Bits(257) })
	// every reduction of 3 ranks is exact in every type, int8 included
	for _, dt := range sdk.AllDataTypes() {
		for _, op := range sdk.AllRedOps() {
			for i := range 30 {
				v := Reduced(dt, op, 3, i)
				require.Equal(t, v, float64(int64(v)), "%s %s %d", dt, op, i)
				require.LessOrEqual(t, v, 127.0)
				require.NotPanics(t, func() { Append(nil, dt, v) })
			}
		}
	}
	require.Equal(t, 3.0, Fold(sdk.Avg, []float64{2, 4}))
	require.Equal(t, 40+12+5.0, Move(1, 1, 17))
}
