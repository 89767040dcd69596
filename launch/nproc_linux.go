package launch

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// nprocLimit is this user's RLIMIT_NPROC soft limit (ok false when there
// is none).
func nprocLimit() (int, bool) {
	var r syscall.Rlimit
	const rlimitNproc = 6 // RLIMIT_NPROC on Linux
	if err := syscall.Getrlimit(rlimitNproc, &r); err != nil || r.Cur == ^uint64(0) || r.Cur > 1<<31 {
		return 0, false
	}
	return int(r.Cur), true
}

// userTasks counts the threads of uid's processes, which RLIMIT_NPROC
// counts (a /proc/PID directory belongs to the process's user).
func userTasks(uid int) int {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		info, err := d.Info()
		if err != nil {
			continue // gone
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != uid {
			continue
		}
		n += procThreads("/proc/" + d.Name() + "/status")
	}
	return n
}

// procThreads reads the Threads line of a /proc/PID/status (1 when the
// process is gone or the line missing: it counted when listed).
func procThreads(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return 1
}
