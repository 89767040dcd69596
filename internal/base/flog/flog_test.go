package flog

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flagcx/flagcx-go/internal/base/env"
)

func configOf(m map[string]string) Config {
	return ConfigFrom(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
}

func TestParseSubsys(t *testing.T) {
	cases := []struct {
		in        string
		on, named []string
	}{
		{"", []string{Init, Bootstrap, Env}, nil},
		{"INIT,BOOTSTRAP,ENV", []string{Init, Bootstrap, Env}, []string{Init, Bootstrap, Env}},
		{"COLL", []string{Coll}, []string{Coll}},
		{" init , coll ", []string{Init, Coll}, []string{Init, Coll}},
		{"ALL", subsystems, subsystems},
		{"COLL,ALL", subsystems, subsystems},
		{"^NET", without(Net), nil},
		{"^COLL,P2P", without(Coll, P2P), nil},
		{"^ALL", nil, nil},
		{"NOPE", nil, nil},
		{"NOPE,NET", []string{Net}, []string{Net}},
	}
	for _, c := range cases {
		on, named := ParseSubsys(c.in)
		require.ElementsMatch(t, c.on, trueKeys(on), "on for %q", c.in)
		require.ElementsMatch(t, c.named, trueKeys(named), "named for %q", c.in)
	}
}

func without(s ...string) []string {
	var out []string
	for _, a := range subsystems {
		if !strings.Contains(","+strings.Join(s, ",")+",", ","+a+",") {
			out = append(out, a)
		}
	}
	return out
}

func trueKeys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	return out
}

// TestEnabled is the filter: FLAGCX_DEBUG's level and FLAGCX_DEBUG_SUBSYS's
// selection, with FlagCX's rule that a subsystem named alone logs at INFO.
func TestEnabled(t *testing.T) {
	type probe struct {
		level  slog.Level
		subsys string
		want   bool
	}
	cases := []struct {
		debug, subsys string
		probes        []probe
	}{
		{"", "", []probe{{LevelWarn, Init, false}, {LevelInfo, Init, false}, {LevelInfo, Coll, false}}},
		{"", "COLL", []probe{{LevelInfo, Coll, true}, {LevelWarn, Coll, true}, {LevelTrace, Coll, false}, {LevelInfo, Init, false}}},
		{"", "ALL", []probe{{LevelInfo, Coll, true}, {LevelWarn, Net, true}, {LevelTrace, Net, false}}},
		{"", "^NET", []probe{{LevelInfo, Coll, false}}},
		{"INFO", "", []probe{{LevelInfo, Init, true}, {LevelInfo, Bootstrap, true}, {LevelInfo, Coll, false}, {LevelTrace, Init, false}}},
		{"info", "INIT,COLL", []probe{{LevelInfo, Init, true}, {LevelInfo, Coll, true}, {LevelInfo, Net, false}}},
		{"TRACE", "COLL", []probe{{LevelTrace, Coll, true}, {LevelInfo, Coll, true}, {LevelInfo, Init, false}}},
		{"WARN", "COLL", []probe{{LevelWarn, Coll, true}, {LevelInfo, Coll, false}}},
		{"VERSION", "ALL", []probe{{LevelVersion, Init, true}, {LevelWarn, Init, false}}},
		{"NONE", "COLL", []probe{{LevelVersion, Coll, false}, {LevelWarn, Coll, false}}},
		{"INFO", "^COLL", []probe{{LevelInfo, Init, true}, {LevelInfo, Coll, false}, {LevelInfo, Net, true}}},
		{"ABORT", "ALL", []probe{{LevelAbort, P2P, true}, {LevelTrace, P2P, false}}},
		{"LOUD", "COLL", []probe{{LevelInfo, Coll, true}, {LevelTrace, Coll, false}}}, // malformed level: as if unset
	}
	for _, c := range cases {
		cfg := configOf(map[string]string{env.Debug.Name: c.debug, env.DebugSubsys.Name: c.subsys})
		for _, p := range c.probes {
			require.Equal(t, p.want, cfg.Enabled(p.level, p.subsys), "FLAGCX_DEBUG=%q FLAGCX_DEBUG_SUBSYS=%q: %s at %s", c.debug, c.subsys, p.subsys, LevelName(p.level))
		}
	}
	require.ErrorContains(t, configOf(map[string]string{env.Debug.Name: "LOUD"}).Err, `FLAGCX_DEBUG="LOUD": allowed are NONE, VERSION, WARN, INFO, ABORT and TRACE`)
}

func TestFlagCXLevel(t *testing.T) {
	for n, want := range map[int]string{1: "VERSION", 2: "WARN", 3: "INFO", 4: "ABORT", 5: "TRACE"} {
		l, ok := FlagCXLevel(n)
		require.True(t, ok, n)
		require.Equal(t, want, LevelName(l))
	}
	for _, n := range []int{-1, 0, 6} {
		_, ok := FlagCXLevel(n)
		require.False(t, ok, n)
	}
}

// TestLines checks the three kinds of lines and what each shows.
func TestLines(t *testing.T) {
	host, _ := os.Hostname()
	me := fmt.Sprintf("%s:%d ", host, os.Getpid())
	cfg := configOf(map[string]string{env.Debug.Name: "INFO", env.DebugSubsys.Name: "INIT,COLL"})
	cases := []struct {
		name string
		log  func(l *slog.Logger)
		want string
	}{
		{"debug line with rank", func(l *slog.Logger) {
			l.Info("plan rank 1: AllReduce", KeySubsys, Coll, KeyRank, 1)
		}, me + "[1] COLL plan rank 1: AllReduce\n"},
		{"each line of a message prefixed", func(l *slog.Logger) {
			l.Info("a\n  b\n", KeySubsys, Init, KeyRank, 0)
		}, me + "[0] INIT a\n" + me + "[0] INIT   b\n"},
		{"subsystem from With", func(l *slog.Logger) {
			l.With(KeySubsys, "coll").Info("x", "n", 3)
		}, me + "COLL x n=3\n"},
		{"unselected subsystem", func(l *slog.Logger) {
			l.Info("x", KeySubsys, Net)
		}, ""},
		{"below the level", func(l *slog.Logger) {
			l.Log(context.Background(), LevelTrace, "x", KeySubsys, Coll)
		}, ""},
		{"plugin line", func(l *slog.Logger) {
			l.With(KeyPlugin, "nvidia").Warn("no NVML")
		}, "flagcx WARN plugin nvidia: no NVML\n"},
		{"plugin line below the level", func(l *slog.Logger) {
			l.Log(context.Background(), LevelTrace, "x", KeyPlugin, "nvidia")
		}, ""},
		{"warning", func(l *slog.Logger) {
			l.Warn("the rendezvous is unauthenticated")
		}, "flagcx: warning: the rendezvous is unauthenticated\n"},
		{"component notice", func(l *slog.Logger) {
			l.Info("refused connection", KeyComponent, "hostnet")
		}, "flagcx hostnet: refused connection\n"},
		{"grouped attributes", func(l *slog.Logger) {
			l.WithGroup("g").Warn("w", "k", "v")
		}, "flagcx: warning: w g.k=v\n"},
	}
	for _, c := range cases {
		var b strings.Builder
		c.log(New(cfg, &b))
		require.Equal(t, c.want, b.String(), c.name)
	}

	// Notices are shown whatever FLAGCX_DEBUG says.
	var b strings.Builder
	New(configOf(map[string]string{env.Debug.Name: "NONE"}), &b).Warn("w")
	require.Equal(t, "flagcx: warning: w\n", b.String())

	// Enabled is exact for a logger that carries its subsystem.
	l := New(cfg, &b)
	require.True(t, l.With(KeySubsys, Coll).Enabled(context.Background(), LevelInfo))
	require.False(t, l.With(KeySubsys, Net).Enabled(context.Background(), LevelInfo))
	require.False(t, l.With(KeyPlugin, "x").Enabled(context.Background(), LevelTrace))
	require.True(t, l.Enabled(context.Background(), LevelTrace), "a record may name its subsystem itself")
}

func TestDebugFile(t *testing.T) {
	dir := t.TempDir()
	pattern := filepath.Join(dir, "flagcx-%h-%p.log")
	cfg := configOf(map[string]string{env.Debug.Name: "INFO", env.DebugSubsys.Name: "COLL", env.DebugFile.Name: pattern})
	log := slog.New(NewHandler(cfg, nil, nil))
	log.Info("one", KeySubsys, Coll)
	slog.New(NewHandler(cfg, nil, nil)).Info("two", KeySubsys, Coll) // the same file, opened once
	host, _ := os.Hostname()
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("flagcx-%s-%d.log", host, os.Getpid())))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%s:%d COLL one\n%s:%d COLL two\n", host, os.Getpid(), host, os.Getpid()), string(b))
}
