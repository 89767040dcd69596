package shm

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/internal/hostnet/wire"
)

const (
	// MaxPid is PID_MAX_LIMIT on 64-bit Linux.
	MaxPid = 1 << 22
	// maxSegName is the longest name SegName makes (prefix, 12 + 20 + 7 +
	// 16 characters and the dashes), with room to spare.
	maxSegName = 80
)

// SegPrefix opens every file name hostnet makes in the shm directory.
const SegPrefix = "flagcx-"

// ---- segment names ----------------------------------------------------------

// nsID is the number in /proc/self/ns/pid ("pid:[4026531836]"), or "0".
func nsID(ns string) string {
	if i, j := strings.IndexByte(ns, '['), strings.IndexByte(ns, ']'); i >= 0 && j > i+1 && allDigits(ns[i+1:j], 20) {
		return ns[i+1 : j]
	}
	return "0"
}

func bootTag(boot string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(boot) {
		if b.Len() < 12 && (r >= '0' && r <= '9' || r >= 'a' && r <= 'z') {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "noboot"
	}
	return b.String()
}

// SegName is the file name of a segment made by pid: the boot id and pid
// namespace let CleanStaleShm tell, without opening it, whether its creator
// could still be alive. It is the only pattern of names hostnet creates in
// the shm directory, and ParseSegName accepts nothing else.
func SegName(boot, pidns string, pid int, token uint64) string {
	return fmt.Sprintf("%s%s-%s-%d-%016x", SegPrefix, bootTag(boot), nsID(pidns), pid, token)
}

// ParseSegName undoes SegName, strictly: flagcx-, 1 to 12 of [0-9a-z] (or
// "noboot"), 1 to 20 digits, a pid in 1..maxPid, 16 lowercase hex digits.
// A name it accepts has no separator and no dot, so it can only name a
// file directly inside the shm directory.
func ParseSegName(name string) (boot, ns string, pid int, token uint64, ok bool) {
	if len(name) > maxSegName || !strings.HasPrefix(name, SegPrefix) {
		return "", "", 0, 0, false
	}
	f := strings.Split(name[len(SegPrefix):], "-")
	if len(f) != 4 || f[0] == "" || len(f[0]) > 12 || bootTag(f[0]) != f[0] || !allDigits(f[1], 20) ||
		!allDigits(f[2], 7) || f[2][0] == '0' || len(f[3]) != 16 || strings.ToLower(f[3]) != f[3] {
		return "", "", 0, 0, false
	}
	p, err1 := strconv.Atoi(f[2])
	t, err2 := strconv.ParseUint(f[3], 16, 64)
	if err1 != nil || err2 != nil || p <= 0 || p > MaxPid {
		return "", "", 0, 0, false
	}
	return f[0], f[1], p, t, true
}

func allDigits(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ---- files in the shm directory ---------------------------------------------

// The shm directory is opened as an os.Root for every file named by a peer
// (or found in the directory): even a name that passed ParseSegName is
// resolved inside it, never through a path that could leave it.

// openShmFile opens the segment name in dir for reading and writing.
func openShmFile(dir, name string) (*os.File, error) {
	if _, _, _, _, ok := ParseSegName(name); !ok {
		return nil, fmt.Errorf("%s is not the name of a flagcx segment: %w", wire.QuoteIfOdd(name, 96), wire.ErrProtocol)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.OpenFile(name, os.O_RDWR, 0)
}

// RemoveShmFile removes the segment name from dir; names that are not
// segment names are refused.
func RemoveShmFile(dir, name string) error {
	if _, _, _, _, ok := ParseSegName(name); !ok {
		return fmt.Errorf("%s is not the name of a flagcx segment: %w", wire.QuoteIfOdd(name, 96), wire.ErrProtocol)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Remove(name)
}
