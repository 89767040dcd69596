// Package launch finds out where a process's rank comes from: an external
// launcher (mpirun, torchrun, srun, a PMI launcher such as MPICH's hydra)
// read from its environment variables, or flagcx's own local launcher,
// which starts the ranks of one machine as child processes.
//
// FromEnv only reads variables; Job.ID then produces the communicator's
// unique id (hosting the rendezvous on rank 0, or going through a file when
// the launcher gives no address), and Job.Joined cleans up after InitRank.
//
//	job, ok, err := launch.FromEnv(os.LookupEnv)
//	id, err := job.ID()
//	comm, err := core.InitRank(id, job.NRanks, job.Rank)
//	job.Joined()
//
// Local is the local launcher (local.go): it first refuses more ranks
// than this host can hold (limits.go), then starts the ranks as copies of
// this program, passes SIGINT and SIGTERM on to them, ends the launch when
// one fails (KeepGoing lets the survivors of a lost rank go on), and names
// the plugin call a rank that a fatal signal killed was in (Crash,
// crash.go). A rank reports an error that may keep it from exiting with
// ReportFatal; CheckSettings checks, once before any rank starts, the
// variables the ranks would read.
package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flagcx/flagcx-go/core"
	"github.com/flagcx/flagcx-go/internal/base/env"
	"github.com/flagcx/flagcx-go/internal/base/flog"
	"github.com/flagcx/flagcx-go/internal/hostnet"
	"github.com/flagcx/flagcx-go/internal/hostnet/tcp"
	"github.com/flagcx/flagcx-go/sdk"
)

// The variables flagcx's local launcher sets for its children, and the ones
// a user may set to launch ranks by hand (declared in internal/base/env).
var (
	EnvUniqueID   = env.UniqueID.Name   // a core.UniqueID string
	EnvRank       = env.Rank.Name       // this process's rank
	EnvNRanks     = env.NRanks.Name     // the rank count
	EnvLocalRank  = env.LocalRank.Name  // rank among the ranks of this host
	EnvLocalSize  = env.LocalSize.Name  // ranks on this host
	EnvCommID     = env.CommID.Name     // ip:port of the rendezvous (rank 0)
	EnvCommSecret = env.CommSecret.Name // 32 hex digits shared by all ranks
	EnvTimeout    = env.Timeout.Name    // seconds or a Go duration
)

// EnvRequireSecret=1 makes a rendezvous beyond loopback without
// FLAGCX_COMM_SECRET an error instead of a warning: for clusters where a
// forgotten secret must stop the job rather than scroll by.
var EnvRequireSecret = env.RequireSecret.Name

// DefaultTimeout bounds the wait for rank 0's id file: FLAGCX_TIMEOUT's
// default, as every wait's.
const DefaultTimeout = tcp.DefaultTimeout

// Job is this process's place in a job, as its launcher described it.
type Job struct {
	// Launcher names who started the process: "flagcx" (the local
	// launcher, or FLAGCX_RANK set by hand), "torchrun", "mpirun" (Open
	// MPI), "pmi" (MPICH hydra, Intel MPI) or "slurm" (srun).
	Launcher     string
	Rank, NRanks int
	// LocalRank and LocalSize place the rank among the ranks of this host;
	// -1 when the launcher does not say.
	LocalRank, LocalSize int

	// How the unique id is found; exactly one of these applies.
	//
	// GivenID is set when FLAGCX_UNIQUE_ID named the id.
	GivenID *core.UniqueID
	// Addr is the rendezvous address (host:port) that rank 0 hosts and the
	// others dial; AddrFrom names the variables it came from.
	Addr, AddrFrom string
	// File is the id file of a file rendezvous: every rank runs on this
	// host and the launcher gave no address.
	File string

	// Secret is the communicator's secret when Addr is used: from
	// FLAGCX_COMM_SECRET, else derived from the launcher's job identity
	// and the address (SecretFrom says which). A derived secret keeps
	// concurrent jobs from joining each other's communicators by mistake;
	// it does not protect against an attacker on the network, who can
	// read the same job identity. Set FLAGCX_COMM_SECRET for that.
	Secret     hostnet.Secret
	SecretFrom string
	// UserSecret is true when FLAGCX_COMM_SECRET was set.
	UserSecret bool
	// RequireSecret is FLAGCX_REQUIRE_SECRET: ID fails instead of warning
	// when a derived secret guards a rendezvous that is not on loopback.
	RequireSecret bool
	// Stderr receives ID's warning (nil: the process's logger, on stderr).
	Stderr io.Writer
	warned bool

	// Identity is the launcher's job identity (job id, step id, run id...),
	// or the parent process id when the launcher gives none.
	Identity string
	// Timeout bounds the wait for the id file (FLAGCX_TIMEOUT).
	Timeout time.Duration
}

// vars reads the launchers' variables; FLAGCX_* ones the registry
// declares (internal/base/env), the others belong to their launchers.
type vars struct {
	lookup env.Lookup
}

func (e vars) get(name string) (string, bool) {
	v, ok := e.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// int reads an integer variable; set reports whether it was present.
func (e vars) int(name string) (v int, set bool, err error) {
	s, ok := e.get(name)
	if !ok {
		return 0, false, nil
	}
	v, err = strconv.Atoi(s)
	if err != nil {
		return 0, true, fmt.Errorf("%w: %s=%q is not an integer", sdk.ErrInvalidArgument, name, s)
	}
	return v, true, nil
}

// launcherDef describes how one launcher announces rank and size.
type launcherDef struct {
	name             string
	rank, size       string // variables
	localRank        string
	localSize        []string // first one set wins
	identity         []string // job identity variables, all that are set
	detect           func(e vars) bool
	allLocal         func(e vars, size int) bool // nil: use localSize
	hint             string                      // how the variables are normally set
	torchAgentOffset bool
}

var launchers = []launcherDef{
	{
		name: "flagcx", rank: EnvRank, size: EnvNRanks,
		localRank: EnvLocalRank, localSize: []string{EnvLocalSize},
		identity: []string{},
		hint:     "set by flagcx's local launcher (--np) or by hand",
	},
	{
		name: "torchrun", rank: "RANK", size: "WORLD_SIZE",
		localRank: "LOCAL_RANK", localSize: []string{"LOCAL_WORLD_SIZE"},
		identity: []string{"TORCHELASTIC_RUN_ID"},
		hint:     "set by torchrun",
		// With the agent's store on MASTER_PORT (torch >= 2.3 sets
		// TORCHELASTIC_USE_AGENT_STORE), rank 0 cannot listen there.
		torchAgentOffset: true,
	},
	{
		name: "mpirun", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: []string{"OMPI_COMM_WORLD_LOCAL_SIZE"},
		identity: []string{"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"},
		hint:     "set by Open MPI's mpirun",
	},
	{
		name: "pmi", rank: "PMI_RANK", size: "PMI_SIZE",
		localRank: "MPI_LOCALRANKID", localSize: []string{"MPI_LOCALNRANKS"},
		identity: []string{"PMI_JOBID", "PMIX_NAMESPACE"},
		hint:     "set by a PMI launcher (MPICH or Intel MPI mpiexec)",
	},
	{
		name: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS",
		localRank: "SLURM_LOCALID",
		identity:  []string{"SLURM_JOB_ID", "SLURM_STEP_ID"},
		// A batch script or salloc shell has SLURM_PROCID and SLURM_NTASKS
		// too, but no step: only srun's tasks are ranks.
		detect: func(e vars) bool {
			_, a := e.get("SLURM_STEP_ID")
			_, b := e.get("SLURM_STEPID")
			return a || b
		},
		allLocal: func(e vars, size int) bool {
			for _, v := range []string{"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"} {
				if n, ok := e.get(v); ok {
					return n == "1"
				}
			}
			for _, v := range []string{"SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
				if n, ok := e.get(v); ok {
					return n == strconv.Itoa(size)
				}
			}
			return false
		},
		hint: "set by srun",
	},
}

// LauncherVars lists every variable FromEnv reads to find a rank, so that a
// launcher can strip them from its children's environment.
func LauncherVars() []string {
	vars := []string{EnvUniqueID, "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",
		"OMPI_COMM_WORLD_NODE_RANK", "SLURM_NPROCS", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID", "SLURM_STEPID",
		"TORCHELASTIC_USE_AGENT_STORE"}
	for _, l := range launchers {
		vars = append(vars, l.rank, l.size, l.localRank)
		vars = append(vars, l.localSize...)
	}
	return vars
}

// FromEnv detects an external launcher (or flagcx's local launcher) from
// the variables lookup returns, and reads this process's rank, the rank
// count and how to find the communicator's unique id. ok is false when no
// launcher is present. It only reads variables: Job.ID does the rest.
//
// Launchers, in the order they are tried (torchrun before mpirun and srun,
// which may have started torchrun itself):
//
//	FLAGCX_RANK, FLAGCX_NRANKS     flagcx's local launcher, or by hand
//	RANK, WORLD_SIZE               torchrun
//	OMPI_COMM_WORLD_RANK, _SIZE    Open MPI
//	PMI_RANK, PMI_SIZE             MPICH / Intel MPI
//	SLURM_PROCID, SLURM_NTASKS     srun (only inside a job step)
//
// The rendezvous address comes from FLAGCX_UNIQUE_ID (which also carries the
// secret), else FLAGCX_COMM_ID, else MASTER_ADDR:MASTER_PORT. Without any,
// ranks that all run on this host meet through a file in the temporary
// directory; ranks spread over hosts need an address and get an error that
// says so.
func FromEnv(lookup func(string) (string, bool)) (Job, bool, error) {
	e := vars{lookup}
	def := detectLauncher(e)
	if def == nil {
		if env.UniqueID.IsSet(e.lookup) {
			return Job{}, false, fmt.Errorf("%w: %s is set but %s and %s are not: set all three, or unset %s", sdk.ErrInvalidUsage, EnvUniqueID, EnvRank, EnvNRanks, EnvUniqueID)
		}
		return Job{}, false, nil
	}
	j, err := readPlace(e, def)
	if err != nil {
		return Job{}, false, err
	}
	if s, ok := env.UniqueID.Raw(e.lookup); ok {
		id, err := core.ParseUniqueID(s)
		if err != nil {
			return Job{}, false, fmt.Errorf("%s: %w", EnvUniqueID, err)
		}
		j.GivenID = &id
		return j, true, nil
	}
	if err := j.readSecret(e); err != nil {
		return Job{}, false, err
	}
	if err := j.readAddr(e, def); err != nil {
		return Job{}, false, err
	}
	if j.Addr != "" {
		if !j.UserSecret {
			j.Secret = deriveSecret(def.name, j.Identity, j.Addr, j.NRanks)
			j.SecretFrom = "derived from the job identity and address"
		}
		return j, true, nil
	}
	if err := j.useFile(e, def); err != nil {
		return Job{}, false, err
	}
	return j, true, nil
}

// detectLauncher is the first launcher whose variables are set (nil:
// none).
func detectLauncher(e vars) *launcherDef {
	for i := range launchers {
		l := &launchers[i]
		_, hasRank := e.get(l.rank)
		_, hasSize := e.get(l.size)
		if !hasRank && !hasSize {
			continue
		}
		if l.detect != nil && !l.detect(e) {
			continue
		}
		if l.name == "torchrun" && (!hasRank || !hasSize) {
			continue // RANK alone is too common a name to mean torchrun
		}
		return l
	}
	return nil
}

// readPlace reads the rank's place in the job from def's variables (rank,
// size, place on this host, job identity) and the settings every job has
// (FLAGCX_TIMEOUT, FLAGCX_REQUIRE_SECRET).
func readPlace(e vars, def *launcherDef) (Job, error) {
	j := Job{Launcher: def.name, LocalRank: -1, LocalSize: -1}
	var err error
	if j.Rank, j.NRanks, err = rankAndSize(e, def); err != nil {
		return Job{}, err
	}
	if j.LocalRank, j.LocalSize, err = localPlace(e, def); err != nil {
		return Job{}, err
	}
	if j.Timeout, err = env.Timeout.Get(e.lookup); err != nil {
		return Job{}, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	if j.RequireSecret, err = env.RequireSecret.Get(e.lookup); err != nil {
		return Job{}, fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}

	// The job identity: what the launcher calls this job.
	var ids []string
	for _, name := range def.identity {
		if v, ok := e.get(name); ok {
			ids = append(ids, name+"="+v)
		}
	}
	j.Identity = strings.Join(ids, ",")
	return j, nil
}

// localPlace reads the rank among the ranks of this host and their count;
// -1 for what def's launcher does not say.
func localPlace(e vars, def *launcherDef) (localRank, localSize int, err error) {
	localRank, localSize = -1, -1
	if def.localRank != "" {
		v, set, err := e.int(def.localRank)
		if err != nil {
			return 0, 0, err
		}
		if set {
			localRank = v
		}
	}
	for _, name := range def.localSize {
		v, set, err := e.int(name)
		if err != nil {
			return 0, 0, err
		}
		if set {
			if v < 1 {
				return 0, 0, fmt.Errorf("%w: %s=%d: a host runs at least one rank", sdk.ErrInvalidArgument, name, v)
			}
			localSize = v
			break
		}
	}
	return localRank, localSize, nil
}

// CheckSettings refuses a malformed FLAGCX_COMM_SECRET, FLAGCX_COMM_ID or
// FLAGCX_TIMEOUT as the ranks of an external launcher would: a local
// launch (--np) makes its own unique id and so never reads the first two,
// and a user who set them must hear that they are wrong rather than have
// them pass silently. Checked once, before any rank starts.
func CheckSettings(lookup func(string) (string, bool)) error {
	e := vars{lookup}
	var j Job
	if err := j.readSecret(e); err != nil {
		return err
	}
	if addr, ok := env.CommID.Raw(lookup); ok {
		if err := checkHostPort(EnvCommID, addr); err != nil {
			return err
		}
	}
	if _, err := env.Timeout.Get(lookup); err != nil {
		return fmt.Errorf("%w: %w", sdk.ErrInvalidArgument, err)
	}
	return nil
}

// readSecret reads FLAGCX_COMM_SECRET, when set.
func (j *Job) readSecret(e vars) error {
	s, ok := env.CommSecret.Raw(e.lookup)
	if !ok {
		return nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(j.Secret) {
		return fmt.Errorf("%w: %s must be %d hex digits (e.g. from `openssl rand -hex %d`), got %d characters", sdk.ErrInvalidArgument, EnvCommSecret, 2*len(j.Secret), len(j.Secret), len(s))
	}
	copy(j.Secret[:], b)
	j.SecretFrom = EnvCommSecret
	j.UserSecret = true
	return nil
}

// readAddr reads the rendezvous address: FLAGCX_COMM_ID, else
// MASTER_ADDR:MASTER_PORT (the port after it when torchrun's agent store
// holds MASTER_PORT). Without either, Addr stays empty.
func (j *Job) readAddr(e vars, def *launcherDef) error {
	if addr, ok := env.CommID.Raw(e.lookup); ok {
		if err := checkHostPort(EnvCommID, addr); err != nil {
			return err
		}
		j.Addr, j.AddrFrom = addr, EnvCommID
		return nil
	}
	host, ok := e.get("MASTER_ADDR")
	if !ok {
		return nil
	}
	port, ok := e.get("MASTER_PORT")
	if !ok {
		return fmt.Errorf("%w: MASTER_ADDR is set but MASTER_PORT is not: set both, or set %s=host:port", sdk.ErrInvalidUsage, EnvCommID)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: MASTER_PORT=%q is not a port number (1-65535)", sdk.ErrInvalidArgument, port)
	}
	from := "MASTER_ADDR:MASTER_PORT"
	if def.torchAgentOffset {
		if v, _ := e.get("TORCHELASTIC_USE_AGENT_STORE"); strings.EqualFold(v, "true") || v == "1" {
			// torchrun's agent already listens on MASTER_PORT.
			if p == 65535 {
				return fmt.Errorf("%w: torchrun's store holds MASTER_PORT=65535 and the next port does not exist: set %s=host:port", sdk.ErrInvalidUsage, EnvCommID)
			}
			p++
			from = "MASTER_ADDR:MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)"
		}
	}
	j.Addr, j.AddrFrom = net.JoinHostPort(host, strconv.Itoa(p)), from
	return nil
}

// useFile sets up a file rendezvous, for a job without an address: it
// works when every rank is on this host.
func (j *Job) useFile(e vars, def *launcherDef) error {
	allLocal := j.LocalSize == j.NRanks
	if def.allLocal != nil && !allLocal {
		allLocal = def.allLocal(e, j.NRanks)
	}
	if j.NRanks == 1 {
		allLocal = true
	}
	if !allLocal {
		return fmt.Errorf("%w: %s=%d (%s) asks for %d ranks, but no rendezvous address is set and not every rank is known to run on this host: set %s=host:port (a free port on the host of rank 0; MASTER_ADDR and MASTER_PORT work too)",
			sdk.ErrInvalidUsage, def.size, j.NRanks, def.hint, j.NRanks, EnvCommID)
	}
	if j.Identity == "" {
		// Every local rank of one launch shares its parent (mpirun's or
		// srun's daemon, hydra's proxy, torchrun's agent).
		j.Identity = fmt.Sprintf("ppid=%d", os.Getppid())
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("flagcx-go file rendezvous v1\x00%s\x00%s\x00%d", def.name, j.Identity, j.NRanks)))
	j.File = filepath.Join(os.TempDir(), fmt.Sprintf("flagcx-%d-%s.id", os.Getuid(), hex.EncodeToString(sum[:8])))
	return nil
}

func rankAndSize(e vars, def *launcherDef) (rank, size int, err error) {
	rank, hasRank, err := e.int(def.rank)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (%s)", err, def.hint)
	}
	size, hasSize, err := e.int(def.size)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (%s)", err, def.hint)
	}
	switch {
	case !hasRank:
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not (%s): set both", sdk.ErrInvalidUsage, def.size, def.rank, def.hint)
	case !hasSize:
		return 0, 0, fmt.Errorf("%w: %s is set but %s is not (%s): set both", sdk.ErrInvalidUsage, def.rank, def.size, def.hint)
	case size < 1:
		return 0, 0, fmt.Errorf("%w: %s=%d: a job has at least one rank", sdk.ErrInvalidArgument, def.size, size)
	case rank < 0 || rank >= size:
		return 0, 0, fmt.Errorf("%w: %s=%d is outside 0..%d (%s=%d)", sdk.ErrInvalidArgument, def.rank, rank, size-1, def.size, size)
	}
	return rank, size, nil
}

// ParseTimeout reads FLAGCX_TIMEOUT's forms: seconds ("30", "2.5") or a Go
// duration ("45s", "2m"); it must be positive. It is env.ParseDuration,
// the one parser of every deadline.
func ParseTimeout(s string) (time.Duration, error) { return env.ParseDuration(s) }

func checkHostPort(name, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host != "" {
		if p, perr := strconv.Atoi(port); perr == nil && p >= 1 && p <= 65535 {
			return nil
		}
	}
	return fmt.Errorf("%w: %s=%q is not host:port (e.g. 10.0.0.1:29500, [fd00::1]:29500)", sdk.ErrInvalidArgument, name, addr)
}

// deriveSecret makes the secret every rank of one job computes alike from
// what its launcher tells them all: SHA-256 of the launcher, the job
// identity, the rank count and the rendezvous address, truncated to 16
// bytes. It separates concurrent jobs; it is no protection against anyone
// who can read the job's environment or guess its identity.
func deriveSecret(launcher, identity, addr string, nranks int) hostnet.Secret {
	sum := sha256.Sum256([]byte(fmt.Sprintf("flagcx-go job secret v1\x00%s\x00%s\x00%d\x00%s", launcher, identity, nranks, addr)))
	var s hostnet.Secret
	copy(s[:], sum[:len(s)])
	return s
}

// checkSecret runs before the rendezvous: a secret derived from what the
// launcher tells every rank is guessable, which matters once the
// rendezvous can be reached from other hosts. Rank 0 says so, once per
// job (the other ranks would only repeat it); FLAGCX_REQUIRE_SECRET=1
// turns it into an error on every rank.
func (j *Job) checkSecret() error {
	if j.UserSecret || j.Addr == "" || (!j.RequireSecret && (j.Rank != 0 || j.warned)) {
		return nil
	}
	if isLoopback(j.Addr) {
		return nil
	}
	identity := j.Identity
	if identity == "" {
		identity = "none"
	}
	if j.RequireSecret {
		return fmt.Errorf("%w: %s=1, but %s is not set and the rendezvous at %s (from %s) is not on loopback: the job's secret would be derived from the launcher (%s), the rank count, the address and the job identity (%s), which anyone who can reach the address may guess. Draw one secret and give that same value to every rank, e.g. export %s=$(openssl rand -hex 16) once where the job is launched (mpirun: add -x %s), or unset %s",
			sdk.ErrInvalidUsage, EnvRequireSecret, EnvCommSecret, j.Addr, j.AddrFrom, j.Launcher, identity, EnvCommSecret, EnvCommSecret, EnvRequireSecret)
	}
	j.warned = true
	log := flog.Default()
	if j.Stderr != nil {
		log = flog.To(j.Stderr)
	}
	log.Warn(fmt.Sprintf("the rendezvous at %s (from %s) is unauthenticated: %s is not set, so the job's secret is derived from the launcher (%s), the rank count, the address and the job identity (%s), and anyone who can reach the address and guess those can join the job. Draw one secret and give that same value to every rank, e.g. export %s=$(openssl rand -hex 16) once where the job is launched (mpirun: add -x %s); %s=1 makes this an error.",
		j.Addr, j.AddrFrom, EnvCommSecret, j.Launcher, identity, EnvCommSecret, EnvCommSecret, EnvRequireSecret))
	return nil
}

// isLoopback reports whether host:port can only be reached from this host:
// a loopback address, "localhost", or a name whose every address is
// loopback. A name that does not resolve (in 2 s) counts as reachable from
// elsewhere, so the warning errs on the side of being said.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false
		}
	}
	return true
}
