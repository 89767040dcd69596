package core_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/flagcx/flagcx-go/conformance/heterotest"
	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
	"github.com/stretchr/testify/require"
)

// osTransports are the host transports the one-sided tests run over: the
// ranks' shared memory (AllocWindow's windows copied straight, the others
// through the rings) and TCP (FLAGCX_SHM_DISABLE=1).
var osTransports = []struct {
	name, shmDisable string
}{
	{"shm", ""},
	{"tcp", "1"},
}

func shmUsable(t *testing.T) bool {
	if hostnet.BootID() == "" {
		return false
	}
	_, err := os.Stat(hostnet.DefaultShmDir)
	return err == nil
}

// TestOneSidedExact runs heterotest's exact one-sided check on host ranks
// (goroutines) over each transport.
func TestOneSidedExact(t *testing.T) {
	for _, tr := range osTransports {
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d ranks", tr.name, n), func(t *testing.T) {
				if tr.shmDisable == "" && !shmUsable(t) {
					t.Skip("no shared memory here")
				}
				t.Setenv(hostnet.EnvShmDisable, tr.shmDisable)
				before := core.FlagcxFiles(t)
				comms := startHetero(t, n)
				checks := make([]int, n)
				fails := make([][]string, n)
				errs := onEvery(comms, func(c *core.Comm) error {
					var err error
					checks[c.Rank()], fails[c.Rank()], err = heterotest.OneSided(c, heterotest.HostMem{})
					return err
				})
				for r := range comms {
					require.NoError(t, errs[r], "rank %d", r)
					require.Empty(t, fails[r], "rank %d", r)
					require.NotZero(t, checks[r])
				}
				for _, c := range comms {
					require.NoError(t, c.Destroy())
				}
				require.Equal(t, before, core.FlagcxFiles(t), "Destroy leaves nothing in /dev/shm")
			})
		}
	}
}

// onEvery runs f on every rank at once.
func onEvery(comms []*core.Comm, f func(c *core.Comm) error) []error {
	errs := make([]error, len(comms))
	done := make(chan struct{})
	for r, c := range comms {
		go func() {
			errs[r] = f(c)
			done <- struct{}{}
		}()
	}
	for range comms {
		<-done
	}
	return errs
}

// TestOneSidedPeerNeverSignals: a wait for a signal that never comes
// fails at the deadline, naming the peer and how far it got.
func TestOneSidedPeerNeverSignals(t *testing.T) {
	for _, tr := range osTransports {
		t.Run(tr.name, func(t *testing.T) {
			if tr.shmDisable == "" && !shmUsable(t) {
				t.Skip("no shared memory here")
			}
			t.Setenv(hostnet.EnvShmDisable, tr.shmDisable)
			comms := startHetero(t, 3, core.WithTimeout(time.Second))
			errs := onEvery(comms, func(c *core.Comm) error {
				if _, err := c.AllocWindow(64); err != nil {
					return err
				}
				switch c.Rank() {
				case 0: // signals once, where rank 1 waits for two
					return c.Signal(1, 0)
				case 1:
					return c.WaitSignal([]core.SignalWait{{Peer: 0, Value: 2}, {Peer: 2, Value: 1}}, 0)
				}
				return nil
			})
			require.NoError(t, errs[0])
			require.NoError(t, errs[2])
			err := errs[1]
			require.ErrorIs(t, err, sdk.ErrRemoteError)
			require.ErrorIs(t, err, core.ErrTimeout)
			require.Regexp(t, `rank 0( \(host [^)]*\))? signalled 1 times, 2 awaited`, err.Error())
			require.Regexp(t, `rank 2( \(host [^)]*\))? signalled 0 times, 1 awaited`, err.Error())
		})
	}
}

// TestOneSidedWindowFreedUnderUse: a rank frees its window while a peer
// still uses it; the peer's Put and Get fail with an error naming the rank
// and the window (nothing crashes), and the pair goes on working on
// another window.
func TestOneSidedWindowFreedUnderUse(t *testing.T) {
	for _, tr := range osTransports {
		for _, kind := range []string{"AllocWindow", "RegisterWindow"} {
			t.Run(tr.name+"/"+kind, func(t *testing.T) {
				if tr.shmDisable == "" && !shmUsable(t) {
					t.Skip("no shared memory here")
				}
				t.Setenv(hostnet.EnvShmDisable, tr.shmDisable)
				comms := startHetero(t, 2, core.WithTimeout(5*time.Second))
				const size = 1 << 20
				putErr, getErr := make([]error, 2), make([]error, 2)
				got := make([][]byte, 2)
				errs := onEvery(comms, func(c *core.Comm) error {
					mk := func() (*core.Window, error) {
						if kind == "AllocWindow" {
							return c.AllocWindow(size)
						}
						return c.RegisterWindow(core.HostBuffer(make([]byte, size)))
					}
					w, err := mk()
					if err != nil {
						return err
					}
					spare, err := mk()
					if err != nil {
						return err
					}
					if c.Rank() == 1 {
						if err := w.Free(); err != nil {
							return err
						}
						copy(spare.Buffer().Host(), "still works")
					}
					if err := c.HostAllGather(nil, nil); err != nil {
						return err
					}
					if c.Rank() == 0 {
						op := core.RMA{Local: w, Remote: w, RemoteOff: 3, Bytes: size - 3}
						putErr[0] = c.Put(1, op, 0)
						if putErr[0] == nil { // over the links the refusal comes back later
							putErr[0] = c.WaitCounter(1) // the first operation of rank 0
						}
						getErr[0] = c.Get(1, op, 0)
						got[0] = make([]byte, 11)
						if err := c.Get(1, core.RMA{Local: spare, Remote: spare, Bytes: 11}, 0); err != nil {
							return err
						}
						copy(got[0], spare.Buffer().Host())
					}
					return c.HostAllGather(nil, nil)
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
				for _, err := range []error{putErr[0], getErr[0]} {
					require.ErrorIs(t, err, sdk.ErrInvalidUsage)
					require.ErrorContains(t, err, "rank 1")
					require.ErrorContains(t, err, "freed its memory of")
					require.ErrorContains(t, err, "window 0")
				}
				require.Equal(t, "still works", string(got[0]))
			})
		}
	}
}

// TestOneSidedMisuse: bad calls fail on the calling rank with one clear
// error and send nothing.
func TestOneSidedMisuse(t *testing.T) {
	comms := startHetero(t, 2)
	c := comms[0]
	require.ErrorIs(t, c.Put(1, core.RMA{}, 0), sdk.ErrInvalidUsage, "no window yet")
	ws := make([]*core.Window, 2)
	errs := onEvery(comms, func(c *core.Comm) error {
		var err error
		ws[c.Rank()], err = c.RegisterWindow(core.HostBuffer(make([]byte, 100+c.Rank())))
		return err
	})
	require.NoError(t, errors.Join(errs...))
	w := ws[0]
	require.Equal(t, 100, w.Size(0))
	require.Equal(t, 101, w.Size(1))
	for _, tc := range []struct {
		name string
		peer int
		op   core.RMA
		want error
		text string
	}{
		{"peer out of range", 2, core.RMA{Local: w, Remote: w, Bytes: 1}, sdk.ErrInvalidArgument, "peer"},
		{"beyond the local window", 1, core.RMA{Local: w, LocalOff: 99, Remote: w, Bytes: 2}, sdk.ErrInvalidArgument, "outside this rank's 100 bytes"},
		{"beyond the peer's window", 1, core.RMA{Local: w, Remote: w, RemoteOff: 100, Bytes: 2}, sdk.ErrInvalidArgument, "outside rank 1's 101 bytes"},
		{"negative length", 1, core.RMA{Local: w, Remote: w, Bytes: -1}, sdk.ErrInvalidArgument, "negative"},
		{"one window missing", 1, core.RMA{Local: w, Bytes: 1}, sdk.ErrInvalidArgument, "both windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Put(tc.peer, tc.op, 0)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.text)
		})
	}
	_, err := c.Window(5)
	require.ErrorIs(t, err, sdk.ErrInvalidArgument)
	got, err := c.Window(0)
	require.NoError(t, err)
	require.Equal(t, 0, got.Index())
	require.Equal(t, 100, got.Buffer().Len())
	require.ErrorIs(t, c.RegisterSignals(core.HostBuffer(make([]byte, 8))), sdk.ErrInvalidArgument, "too small for 2 ranks")
	require.ErrorIs(t, c.WaitSignal([]core.SignalWait{{Peer: 7}}, 0), sdk.ErrInvalidArgument)
	require.NoError(t, w.Free())
	require.NoError(t, w.Free(), "a second Free does nothing")
	err = c.Put(1, core.RMA{Local: w, Remote: w, Bytes: 1}, 0)
	require.ErrorIs(t, err, sdk.ErrInvalidUsage)
	require.ErrorContains(t, err, "freed on this rank")
}

// TestWaitCounterPastWhatWasIssued: a WaitCounter target above the
// operations this rank issued (a put to a peer, a signal, a put to
// itself: 3) fails at once, saying how many were issued and what was
// asked, instead of waiting out the deadline; a target within them is
// reached.
func TestWaitCounterPastWhatWasIssued(t *testing.T) {
	const deadline = 5 * time.Second
	comms := startHetero(t, 2, core.WithTimeout(deadline))
	ws := make([]*core.Window, 2)
	errs := onEvery(comms, func(c *core.Comm) error {
		var err error
		ws[c.Rank()], err = c.AllocWindow(64)
		return err
	})
	require.NoError(t, errors.Join(errs...))
	c, w := comms[0], ws[0]
	require.NoError(t, c.WaitCounter(0), "nothing issued, nothing to wait for")
	require.NoError(t, c.Put(1, core.RMA{Local: w, Remote: w, Bytes: 8}, 0))
	require.NoError(t, c.Signal(1, 0))
	require.NoError(t, c.Put(0, core.RMA{Local: w, LocalOff: 8, Remote: w, Bytes: 8}, 0))
	for _, tc := range []struct {
		name   string
		target uint64
		want   string // "" when reached
	}{
		{"one", 1, ""},
		{"all three", 3, ""},
		{"one more", 4, "WaitCounter(4) on rank 0: only 3 one-sided operations were issued (the counter, 3 now, counts their completions and cannot reach 4): wait for at most 3, or issue the operations first"},
		{"the largest", math.MaxUint64, "WaitCounter(18446744073709551615) on rank 0: only 3 one-sided operations were issued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := c.WaitCounter(tc.target)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Less(t, time.Since(start), deadline/2, "it waited for the deadline")
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, errors.Join(onEvery(comms, func(c *core.Comm) error { return c.Barrier() })...))
}
