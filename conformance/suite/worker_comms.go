package suite

// Communicator cases: unique ids, error strings, creation, destruction,
// abort and several communicators at once.

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/flagcx/flagcx-go/sdk"
	"github.com/flagcx/flagcx-go/sdk/loader"
)

// commUniqueID: two unique ids differ.
func (w *worker) commUniqueID(Spec) error {
	a, err := w.p.UniqueID()
	if err != nil {
		return err
	}
	b, err := w.p.UniqueID()
	if err != nil {
		return err
	}
	if bytes.Equal(a, b) {
		return wrongf("two getUniqueId calls returned the same %d bytes: two communicators would meet", len(a))
	}
	return nil
}

// commErrorString: every result code has a description.
func (w *worker) commErrorString(Spec) error {
	for r := sdk.UnhandledDeviceError; r < sdk.NumResults; r++ {
		if w.p.ErrorString(r) == "" {
			return wrongf("getErrorString(%d) is empty", int(r))
		}
	}
	return nil
}

// commSingle: a one-rank communicator works.
func (w *worker) commSingle(s Spec) error {
	c, err := w.p.CommInitRank(w.dev, 1, s.IDs[0], 0)
	if err != nil {
		return err
	}
	err = w.allReduceCheck(c, s, s.Seed)
	return errors.Join(err, c.Destroy())
}

// commLoop: communicators made and destroyed in a loop.
func (w *worker) commLoop(s Spec) error {
	for i := 0; i < s.Iters; i++ {
		c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[i], w.rank)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		err = w.allReduceCheck(c, s, s.Seed+uint64(i))
		if err = errors.Join(err, c.Destroy()); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	return nil
}

// commMulti: several communicators at once, their collectives interleaved.
func (w *worker) commMulti(s Spec) error {
	var comms []*loader.Comm
	defer func() {
		for _, c := range comms {
			_ = c.Destroy()
		}
	}()
	for i := 0; i < s.Iters; i++ {
		c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[i], w.rank)
		if err != nil {
			return fmt.Errorf("communicator %d: %w", i+1, err)
		}
		comms = append(comms, c)
	}
	sc := &scratch{w: w}
	defer sc.free()
	var jobs []*job
	for i, c := range comms {
		j, err := w.prepColl(sc, c, Spec{Coll: sdk.AllReduce, Type: s.Type, Op: sdk.Sum, Count: s.Count, Seed: s.Seed + uint64(i)})
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	if err := w.runJobs(jobs, false); err != nil {
		return err
	}
	for len(comms) > 0 {
		if err := comms[0].Destroy(); err != nil {
			return err
		}
		comms = comms[1:]
	}
	return nil
}

// commAsyncError: a healthy communicator reports no error.
func (w *worker) commAsyncError(Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	return w.comm.AsyncError()
}

// commAbort: aborting a second communicator leaves the first working.
func (w *worker) commAbort(s Spec) error {
	c, err := w.p.CommInitRank(w.dev, w.nranks, s.IDs[0], w.rank)
	if err != nil {
		return err
	}
	if err := w.allReduceCheck(c, s, s.Seed); err != nil {
		_ = c.Destroy()
		return err
	}
	if err := c.Abort(); err != nil {
		_ = c.Destroy()
		return err
	}
	if w.comm != nil {
		if err := w.allReduceCheck(w.comm, s, s.Seed+1); err != nil {
			return fmt.Errorf("the first communicator after aborting the second: %w", err)
		}
	}
	return nil
}

// commDestroy destroys the rank's communicator after all its work.
func (w *worker) commDestroy(Spec) error {
	if w.comm == nil {
		return errors.New("no communicator")
	}
	err := w.comm.Destroy()
	w.comm = nil
	return err
}
