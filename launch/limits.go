package launch

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/flagcx/flagcx-go/internal/base/bytesize"
	"github.com/flagcx/flagcx-go/internal/hostnet/shm"
	"github.com/flagcx/flagcx-go/sdk"
)

// rankPrivateBytes is the memory one rank takes besides its shared-memory
// segment, the page tables mapping the segments, and its command's own
// buffers (RankBytes): mostly the executable's pages, which the ranks
// share, and its own anonymous memory. 16 MiB leaves room above what bench
// ranks were measured to take (docs/performance.md, "Figures that were in
// comments (issue 41)").
const rankPrivateBytes = 16 << 20

// tasksPerRank is how many kernel tasks (processes and threads: both count
// against RLIMIT_NPROC, pid_max and threads-max) one rank may hold. Go
// starts a thread per P that runs at once, plus sysmon, a template thread
// and threads blocked in system calls, so the count grows with the cores
// (GOMAXPROCS). The ranks inherit this process's GOMAXPROCS (environment,
// cgroup CPU quota); min(GOMAXPROCS, 16) + 8 covers every count measured
// per bench rank (docs/performance.md, "Figures that were in comments
// (issue 41)").
func tasksPerRank() int { return min(runtime.GOMAXPROCS(0), 16) + 8 }

// pageTableBytesPer is how many segment bytes one byte of page table maps
// (8-byte entries for 4 KiB pages): every rank maps every segment of its
// host, so the page tables grow with the square of the ranks (measured at
// 200 ranks: docs/performance.md, "Figures that were in comments (issue
// 41)").
const pageTableBytesPer = 4096 / 8

// hostCapacity is what bounds a local launch on this host; fields that
// could not be read are 0 (and not checked).
type hostCapacity struct {
	nprocLimit   int // RLIMIT_NPROC soft limit; 0 when none is enforced
	userTasks    int // tasks this user runs now
	pidMax       int
	threadsMax   int
	systemTasks  int // tasks the system runs now
	tasksPerRank int
	mem          shm.HostMemory
	shm          shm.ShmConfig // from the environment, before ForRanks
	rankBytes    int64         // what the ranks' command allocates (RankBytes)
}

// readHostCapacity reads this host's limits once, before a launch.
func readHostCapacity() hostCapacity {
	c := hostCapacity{
		tasksPerRank: tasksPerRank(),
		pidMax:       readInt("/proc/sys/kernel/pid_max"),
		threadsMax:   readInt("/proc/sys/kernel/threads-max"),
		systemTasks:  systemTasks(),
	}
	// The kernel does not apply RLIMIT_NPROC to root.
	if lim, ok := nprocLimit(); ok && lim > 0 && os.Getuid() != 0 {
		c.nprocLimit, c.userTasks = lim, userTasks(os.Getuid())
	}
	sc, err := shm.ShmConfigFromEnv()
	if err != nil { // the ranks report malformed settings themselves
		sc = shm.DefaultShmConfig()
	}
	c.shm = sc
	c.mem = shm.ReadHostMemory(sc)
	return c
}

// capacityChecks each say why n ranks do not fit on the host (nil: they
// do). Each grows with n, so the most ranks that fit is found by search.
var capacityChecks = []func(n int, c hostCapacity) error{
	func(n int, c hostCapacity) error {
		room := c.nprocLimit - c.userTasks
		if c.nprocLimit == 0 || n*c.tasksPerRank <= room {
			return nil
		}
		return fmt.Errorf("they need about %s processes and threads (%d each) and this user may start %s more (ulimit -u %s, %s running): raise ulimit -u, or spread the ranks over hosts with a launcher such as mpirun",
			commas(n*c.tasksPerRank), c.tasksPerRank, commas(max(room, 0)), commas(c.nprocLimit), commas(c.userTasks))
	},
	func(n int, c hostCapacity) error {
		lim := c.pidMax // each thread takes a pid too
		if lim == 0 || (c.threadsMax > 0 && c.threadsMax < lim) {
			lim = c.threadsMax
		}
		room := lim - c.systemTasks
		if lim == 0 || n*c.tasksPerRank <= room {
			return nil
		}
		return fmt.Errorf("they need about %s processes and threads (%d each) and the kernel allows %s more (pid_max %s, threads-max %s, %s running): spread the ranks over hosts with a launcher such as mpirun",
			commas(n*c.tasksPerRank), c.tasksPerRank, commas(max(room, 0)), commas(c.pidMax), commas(c.threadsMax), commas(c.systemTasks))
	},
	func(n int, c hostCapacity) error {
		if n < 2 { // one rank makes no segment
			return nil
		}
		if err := shm.CheckShmCapacity(n, c.shm.ForRanks(n), c.mem); err != nil {
			return err
		}
		return shm.CheckShmFree(n, c.shm.ForRanks(n), c.mem)
	},
	func(n int, c hostCapacity) error {
		seg, tables := int64(0), int64(0)
		if sc := c.shm.ForRanks(n); !sc.Disable && n > 1 {
			seg = int64(sc.SegmentBytes())
			tables = int64(n) * seg / pageTableBytesPer
		}
		per := rankPrivateBytes + seg + tables + c.rankBytes
		if c.mem.AvailBytes == 0 || per <= c.mem.AvailBytes/int64(n) {
			return nil
		}
		parts := []string{bytesize.Human(rankPrivateBytes) + " of its own"}
		if c.rankBytes > 0 {
			parts = append(parts, bytesize.Human(c.rankBytes)+" for its command's buffers")
		}
		advice := "run fewer ranks"
		if seg > 0 {
			parts = append(parts, "a "+bytesize.Human(seg)+" shared-memory segment", bytesize.Human(tables)+" of page tables mapping the host's segments")
			advice += ", or set " + shm.EnvShmDisable + "=1 (TCP between the ranks, no segments)"
		}
		return fmt.Errorf("each rank needs about %s of memory (%s) and %s is available: %s",
			bytesize.Human(per), strings.Join(parts, ", "), bytesize.Human(c.mem.AvailBytes), advice)
	},
}

func overCapacity(n int, c hostCapacity) error {
	for _, check := range capacityChecks {
		if err := check(n, c); err != nil {
			return err
		}
	}
	return nil
}

// checkCapacity refuses np ranks this host cannot hold, before any of them
// starts, with the most it can hold, the limit that binds there, and what
// to do.
func checkCapacity(np int, c hostCapacity) error {
	err := overCapacity(np, c)
	if err == nil {
		return nil
	}
	most := sort.Search(np, func(n int) bool { return overCapacity(n+1, c) != nil })
	// Describe the limit that stops most+1 ranks (not always the first
	// that np ranks exceed), with np's figures.
	for _, check := range capacityChecks {
		if check(most+1, c) != nil {
			if e := check(np, c); e != nil {
				err = e
			}
			break
		}
	}
	return fmt.Errorf("%w: %s ranks are more than this host can run (at most %s): %w", sdk.ErrInvalidArgument, commas(np), commas(most), err)
}

// commas writes n with thousands separators: 599,994.
func commas(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + commas(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// systemTasks is the number of tasks (threads) on the system: the "total"
// of /proc/loadavg's "running/total".
func systemTasks() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}
