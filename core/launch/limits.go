package launch

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/hostnet"
	"github.com/flagcx/flagcx-go/sdk"
)

// What one rank of this program costs the host, besides its shared-memory
// segment and the buffers its command allocates (bench checks those):
// measured on the 2-core VM, a bench rank has ~15 MiB of private memory
// (VmRSS minus RssShmem) and 5 threads; Go starts up to one thread per
// core for its scheduler and the collectives' workers, plus a few of its
// own, so a rank is counted as cores+4 tasks.
const rankPrivateBytes = 32 << 20

func tasksPerRank() int { return runtime.NumCPU() + 4 }

// hostCapacity is what bounds a local launch on this host; fields that
// could not be read are 0 (and not checked).
type hostCapacity struct {
	userTasks    int // RLIMIT_NPROC minus what this user runs now
	systemTasks  int // threads-max (and pid_max) minus what runs now
	tasksPerRank int
	mem          hostnet.HostMemory
	shm          hostnet.ShmConfig // for np ranks, or Disable
}

// readHostCapacity reads the limits for a launch of np ranks.
func readHostCapacity(np int) hostCapacity {
	c := hostCapacity{tasksPerRank: tasksPerRank()}
	running := runningTasks()
	if lim, ok := nprocLimit(); ok && lim > 0 {
		c.userTasks = max(lim-running, 0)
	}
	sys := readInt("/proc/sys/kernel/threads-max")
	if pm := readInt("/proc/sys/kernel/pid_max"); pm > 0 && (sys == 0 || pm < sys) {
		sys = pm
	}
	if sys > 0 {
		c.systemTasks = max(sys-running, 0)
	}
	sc, err := hostnet.ShmConfigFromEnv()
	if err != nil { // the ranks report malformed settings themselves
		sc = hostnet.DefaultShmConfig()
	}
	c.shm = sc.ForRanks(np)
	c.mem = hostnet.ReadHostMemory(c.shm)
	return c
}

// checkCapacity refuses np ranks this host cannot hold, before any of them
// starts, with the limit that binds and what to do.
func checkCapacity(np int, c hostCapacity) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %d ranks are more than this host can run: %s", sdk.ErrInvalidArgument, np, fmt.Sprintf(format, args...))
	}
	need := np * c.tasksPerRank
	if c.userTasks > 0 && need > c.userTasks {
		return fail("its ranks need about %d processes and threads (%d each) and this user may start %d more (ulimit -u); run at most %d ranks here, or spread them over hosts with a launcher such as mpirun",
			need, c.tasksPerRank, c.userTasks, c.userTasks/c.tasksPerRank)
	}
	if c.systemTasks > 0 && need > c.systemTasks {
		return fail("its ranks need about %d processes and threads (%d each) and the kernel allows %d more (threads-max, pid_max); run at most %d ranks here",
			need, c.tasksPerRank, c.systemTasks, c.systemTasks/c.tasksPerRank)
	}
	if np > 1 {
		if err := hostnet.CheckShmCapacity(np, c.shm, c.mem); err != nil {
			return fail("%v", err)
		}
		if err := hostnet.CheckShmFree(np, c.shm, c.mem); err != nil {
			return fail("%v", err)
		}
	}
	seg := int64(0)
	if !c.shm.Disable && np > 1 {
		seg = int64(c.shm.SegmentBytes())
	}
	per := rankPrivateBytes + seg
	if c.mem.AvailBytes > 0 && int64(np)*per > c.mem.AvailBytes {
		return fail("each rank needs about %s of memory (%s of its own and a %s shared-memory segment), %s for all, and %s is available; run at most %d ranks here",
			hostnet.FormatBytes(per), hostnet.FormatBytes(rankPrivateBytes), hostnet.FormatBytes(seg), hostnet.FormatBytes(int64(np)*per),
			hostnet.FormatBytes(c.mem.AvailBytes), c.mem.AvailBytes/per)
	}
	return nil
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// runningTasks is the number of threads on the system (/proc/loadavg's
// "running/total"), which bounds what this user runs too.
func runningTasks() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(total)
	return n
}
