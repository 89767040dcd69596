package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

// device is one rank's line of the "# Using devices" block.
type device struct {
	Rank    int    `json:"rank"`
	Pid     int    `json:"pid"`
	Host    string `json:"host"`
	Backend string `json:"backend"`
}

const (
	deviceRecord = 256
	hostField    = 120
	nameField    = 128
)

// gatherDevices collects every rank's device with one AllGather of a
// fixed-size record: rank, pid, host name, backend.
func (r *rankRun) gatherDevices() ([]device, error) {
	host, _ := os.Hostname()
	rec := make([]byte, deviceRecord)
	binary.LittleEndian.PutUint32(rec[0:], uint32(r.rank))
	binary.LittleEndian.PutUint32(rec[4:], uint32(os.Getpid()))
	copy(rec[8:8+hostField-1], host)
	copy(rec[8+hostField:8+hostField+nameField-1], r.be.Name())
	all := make([]byte, deviceRecord*r.n)
	if err := r.comm.HostAllGather(rec, all); err != nil {
		return nil, fmt.Errorf("rank %d: gathering the ranks' devices: %w", r.rank, err)
	}
	devs := make([]device, r.n)
	for i := range devs {
		b := all[i*deviceRecord:]
		devs[i] = device{
			Rank:    int(binary.LittleEndian.Uint32(b[0:])),
			Pid:     int(binary.LittleEndian.Uint32(b[4:])),
			Host:    cstring(b[8 : 8+hostField]),
			Backend: cstring(b[8+hostField : 8+hostField+nameField]),
		}
	}
	return devs, nil
}

func cstring(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
