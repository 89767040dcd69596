package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/sdk"
)

// processStart is when this process started (near enough): an id file older
// than that is left over from an earlier job and is not read.
var processStart = time.Now()

// staleSlack allows for ranks of one job starting a little apart.
const staleSlack = 10 * time.Second

// pollInterval is how often a rank looks for rank 0's id file.
const pollInterval = 20 * time.Millisecond

// ID produces the communicator's unique id for this rank:
//
//   - FLAGCX_UNIQUE_ID: the id it names;
//   - an address: rank 0 hosts the rendezvous there (this process must then
//     live until every rank joined), the others name it. Beyond loopback
//     without FLAGCX_COMM_SECRET, rank 0 first warns once that the job is
//     unauthenticated (every rank fails instead with
//     FLAGCX_REQUIRE_SECRET=1);
//   - a file rendezvous: rank 0 makes an id (hosting its rendezvous on an
//     address of this host) and writes it, readable only by this user, to
//     File; the others wait for the file until Timeout.
func (j *Job) ID() (core.UniqueID, error) {
	switch {
	case j.GivenID != nil:
		return *j.GivenID, nil
	case j.Addr != "":
		if err := j.checkSecret(); err != nil {
			return core.UniqueID{}, err
		}
		if j.Rank != 0 {
			return core.NewUniqueID(j.Addr, j.Secret), nil
		}
		id, err := core.GetUniqueID(core.WithRendezvousAddr(j.Addr), core.WithSecret(j.Secret))
		if err != nil {
			return core.UniqueID{}, fmt.Errorf("rank 0 could not host the rendezvous on %s (from %s): %w", j.Addr, j.AddrFrom, err)
		}
		return id, nil
	case j.File != "":
		if j.Rank == 0 {
			return j.writeIDFile()
		}
		return j.readIDFile()
	}
	return core.UniqueID{}, fmt.Errorf("%w: launch: job has no way to find its unique id", sdk.ErrInternalError)
}

// Joined is called once InitRank returned on this rank: rank 0 of a file
// rendezvous removes the id file. It is safe to call more than once, and on
// any rank.
func (j *Job) Joined() {
	if j.File != "" && j.Rank == 0 {
		_ = os.Remove(j.File)
	}
}

func (j *Job) writeIDFile() (core.UniqueID, error) {
	var opts []core.IDOption
	if j.UserSecret {
		opts = append(opts, core.WithSecret(j.Secret))
	}
	id, err := core.GetUniqueID(opts...)
	if err != nil {
		return core.UniqueID{}, err
	}
	if err := writeFileAtomic(j.File, []byte(id.String()+"\n")); err != nil {
		return core.UniqueID{}, fmt.Errorf("%w: rank 0 could not write the id file for the other ranks: %w (set %s=host:port to rendezvous over the network instead)", sdk.ErrSystemError, err, EnvCommID)
	}
	return id, nil
}

// writeFileAtomic writes data to a 0600 temporary file next to path and
// renames it into place, so that a reader never sees part of it.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func (j *Job) readIDFile() (core.UniqueID, error) {
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	notBefore := processStart.Add(-staleSlack)
	for {
		id, err, done := tryReadIDFile(j.File, notBefore)
		if done {
			if err != nil {
				return core.UniqueID{}, err
			}
			return id, nil
		}
		if time.Now().After(deadline) {
			return core.UniqueID{}, fmt.Errorf("%w: rank %d waited %v for rank 0 to write %s (%s started %d ranks on this host and gave no rendezvous address): is rank 0 running? Set %s=host:port to rendezvous over the network, or raise %s",
				sdk.ErrSystemError, j.Rank, timeout, j.File, j.Launcher, j.NRanks, EnvCommID, EnvTimeout)
		}
		time.Sleep(pollInterval)
	}
}

// tryReadIDFile reads the id file if it is there and fresh; done is false
// when the caller should wait and try again.
func tryReadIDFile(path string, notBefore time.Time) (id core.UniqueID, err error, done bool) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return id, nil, false
	}
	if err != nil {
		return id, fmt.Errorf("%w: reading the id file: %w", sdk.ErrSystemError, err), true
	}
	if st.ModTime().Before(notBefore) {
		return id, nil, false // left over from an earlier job; rank 0 will replace it
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return id, nil, false // removed between stat and read
	}
	if err != nil {
		return id, fmt.Errorf("%w: reading the id file: %w", sdk.ErrSystemError, err), true
	}
	id, err = core.ParseUniqueID(strings.TrimSpace(string(b)))
	if err != nil {
		return id, fmt.Errorf("id file %s: %w", path, err), true
	}
	return id, nil, true
}
