//go:build linux

package shm

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// deadPid is a pid of this pid namespace that no process has now.
func deadPid(t testing.TB) int {
	t.Helper()
	max := 32768
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			max = n
		}
	}
	for pid := max - 1; pid > 1000; pid-- {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return pid
		}
	}
	t.Fatal("no free pid")
	return 0
}

func TestSegNameRoundTrip(t *testing.T) {
	name := SegName("c42f64a0-979f-44ea-a142-703fbfda556f", "pid:[4026531836]", 4242, 0xdeadbeef)
	require.Equal(t, "flagcx-c42f64a0979f-4026531836-4242-00000000deadbeef", name)
	boot, ns, pid, token, ok := ParseSegName(name)
	require.True(t, ok)
	require.Equal(t, "c42f64a0979f", boot)
	require.Equal(t, "4026531836", ns)
	require.Equal(t, 4242, pid)
	require.Equal(t, uint64(0xdeadbeef), token)
	require.Equal(t, "flagcx-noboot-0-7-0000000000000001", SegName("", "", 7, 1), "unknown boot id and namespace")
	for _, bad := range []string{"", "flagcx-", "flagcx-a-b-c", "flagcx-a-b-0-1", "flagcx-a-b--1-1", "flagcx-a-b-x-1",
		"flagcx-a-b-1-zz", "flagcx-a-b-1-1-1", "other-a-b-1-1", "hostnet-test-1234"} {
		_, _, _, _, ok := ParseSegName(bad)
		require.False(t, ok, bad)
	}
}

func TestCreateShmSegment(t *testing.T) {
	dir := shmTestDir(t)
	sc := ShmConfig{P2PBytes: 100 << 10, WindowBytes: 200 << 10, Dir: dir}
	seg, err := CreateShmSegment(sc)
	require.NoError(t, err)
	defer seg.Close()
	path := filepath.Join(dir, seg.Name())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, int64(sc.SegmentBytes()), fi.Size())
	require.Equal(t, int64(shmPage+100<<10+200<<10), fi.Size(), "areas rounded to pages")
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	_, _, pid, _, ok := ParseSegName(seg.Name())
	require.True(t, ok)
	require.Equal(t, os.Getpid(), pid)
	require.Len(t, seg.p2p, 100<<10)
	require.Len(t, seg.window, 200<<10)

	// A peer maps it and sees the same geometry and memory.
	peer, err := openShmSegment(dir, seg.Name(), os.Getpid())
	require.NoError(t, err)
	require.Len(t, peer.p2p, 100<<10)
	require.Len(t, peer.window, 200<<10)
	seg.window[7] = 0x77
	require.Equal(t, byte(0x77), peer.window[7])
	require.NoError(t, peer.Close())
	_, err = os.Stat(path)
	require.NoError(t, err, "closing a peer's mapping does not unlink the owner's file")

	// Two segments of one process have different names.
	seg2, err := CreateShmSegment(sc)
	require.NoError(t, err)
	require.NotEqual(t, seg.Name(), seg2.Name())
	require.NoError(t, seg2.Close())
	_, err = os.Stat(filepath.Join(dir, seg2.Name()))
	require.True(t, os.IsNotExist(err), "Close unlinks the owner's file")
	require.NoError(t, seg2.Close(), "closing twice is harmless")

	require.NoError(t, seg.Close())
	require.Empty(t, dirEntries(t, dir))
}

func TestCreateShmSegmentFails(t *testing.T) {
	dir := shmTestDir(t)
	tests := []struct {
		name   string
		sc     ShmConfig
		want   []string
		causes []error // errors.Is holds for each, beside ErrShmUnavailable
	}{
		{"disabled", ShmConfig{Disable: true, P2PBytes: MinShmAreaBytes, Dir: dir}, []string{EnvShmDisable + "=1"}, nil},
		{"no such directory", ShmConfig{P2PBytes: MinShmAreaBytes, Dir: filepath.Join(dir, "missing")}, []string{"creating a segment in", "missing", EnvShmDisable},
			[]error{fs.ErrNotExist, syscall.ENOENT}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seg, err := CreateShmSegment(tc.sc)
			require.Nil(t, seg)
			require.ErrorIs(t, err, ErrShmUnavailable)
			for _, s := range tc.want {
				require.Contains(t, err.Error(), s)
			}
			for _, cause := range tc.causes {
				require.ErrorIs(t, err, cause)
			}
			require.Empty(t, dirEntries(t, dir))
		})
	}
}

// TestCleanStaleShmNames: only segments of this kernel and pid namespace
// whose creator is gone are removed.
func TestCleanStaleShmNames(t *testing.T) {
	dir := shmTestDir(t)
	boot, ns, dead := BootID(), PidNamespace(), deadPid(t)
	tests := []struct {
		name    string
		file    string
		removed bool
	}{
		{"dead creator", SegName(boot, ns, dead, 1), true},
		{"this process", SegName(boot, ns, os.Getpid(), 2), false},
		{"init, alive", SegName(boot, ns, 1, 3), false},
		{"parent, alive", SegName(boot, ns, os.Getppid(), 4), false},
		{"dead pid of another boot", SegName("0123456789ab-other", ns, dead, 5), false},
		{"dead pid of another pid namespace", SegName(boot, "pid:[1]", dead, 6), false},
		{"not a segment", "flagcx-garbage", false},
		{"bad pid", "flagcx-" + bootTag(boot) + "-" + nsID(ns) + "-x-0000000000000007", false},
		{"pid 0", "flagcx-" + bootTag(boot) + "-" + nsID(ns) + "-0-0000000000000008", false},
		{"another file", "notes.txt", false},
	}
	for _, tc := range tests {
		require.NoError(t, os.WriteFile(filepath.Join(dir, tc.file), []byte("x"), 0o600), tc.name)
	}
	require.Equal(t, 1, CleanStaleShm(ShmConfig{Dir: dir}))
	for _, tc := range tests {
		_, err := os.Stat(filepath.Join(dir, tc.file))
		require.Equal(t, tc.removed, os.IsNotExist(err), "%s: %s", tc.name, tc.file)
	}
	require.Equal(t, 0, CleanStaleShm(ShmConfig{Dir: dir}), "nothing more to remove")
	require.Equal(t, 0, CleanStaleShm(ShmConfig{Dir: filepath.Join(dir, "missing")}))

	// CreateShmSegment cleans first.
	stale := SegName(boot, ns, dead, 9)
	require.NoError(t, os.WriteFile(filepath.Join(dir, stale), nil, 0o600))
	seg, err := CreateShmSegment(ShmConfig{P2PBytes: MinShmAreaBytes, WindowBytes: MinShmAreaBytes, Dir: dir})
	require.NoError(t, err)
	defer seg.Close()
	_, err = os.Stat(filepath.Join(dir, stale))
	require.True(t, os.IsNotExist(err), "CreateShmSegment removes stale segments")
}

// TestOpenShmSegmentRejects: a peer's announcement is checked against the
// file before anything is trusted.
func TestOpenShmSegmentRejects(t *testing.T) {
	dir := shmTestDir(t)
	seg, err := CreateShmSegment(ShmConfig{P2PBytes: MinShmAreaBytes, WindowBytes: MinShmAreaBytes, Dir: dir})
	require.NoError(t, err)
	defer seg.Close()
	me := os.Getpid()
	boot, ns := BootID(), PidNamespace()
	write := func(name string, size int, f func([]byte)) string {
		b := make([]byte, size)
		if f != nil {
			f(b)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
		return name
	}
	// A copy of seg's header with one field changed.
	forged := func(token uint64, change func(h []byte)) string {
		return write(SegName(boot, ns, me, token), len(seg.mem), func(b []byte) {
			copy(b, seg.mem[:shmPage])
			change(b)
		})
	}
	le := func(b []byte, off int, v uint64) {
		for i := range 8 {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	tests := []struct {
		name string
		file string
		pid  int
		want []string
	}{
		{"another pid than announced", seg.Name(), me + 1, []string{"not the name of a flagcx segment of pid"}},
		{"not a segment name", write("hello", 3*shmPage, nil), me, []string{"not the name of a flagcx segment"}},
		{"a path", "flagcx-x/../../etc-0-" + strconv.Itoa(me) + "-1", me, []string{"not the name of a flagcx segment"}},
		{"missing file", SegName(boot, ns, me, 0x1234), me, []string{"opening the segment of pid"}},
		{"too small", write(SegName(boot, ns, me, 0x10), shmPage, nil), me, []string{"not a flagcx segment"}},
		{"no magic", write(SegName(boot, ns, me, 0x11), 3*shmPage, nil), me, []string{"bad magic"}},
		{"wrong size in header", forged(0x12, func(h []byte) { le(h, offSize, 1); le(h, offToken, 0x12) }), me, []string{"impossible geometry"}},
		{"areas do not add up", forged(0x13, func(h []byte) { le(h, offP2P, shmPage); le(h, offToken, 0x13) }), me, []string{"impossible geometry"}},
		{"another token", forged(0x14, func(h []byte) {}), me, []string{"is not the 0000000000000014 in its name"}},
		{"another creator pid", forged(0x15, func(h []byte) { le(h, offPid, 1); le(h, offToken, 0x15) }), me, []string{"made by pid 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := openShmSegment(dir, tc.file, tc.pid)
			require.Nil(t, s)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// shmTestDir is a fresh directory on the tmpfs of /dev/shm (so that
// fallocate, sizes and futexes behave as in production), removed after the
// test; t.TempDir where there is no /dev/shm.
func shmTestDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp(DefaultShmDir, "hostnet-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// dirEntries lists the names in dir.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
