package launch

import "syscall"

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
