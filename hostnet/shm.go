package hostnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Shared memory between two processes of one host.
//
// A ShmLink behaves like a Link (whole, ordered, length-checked messages;
// full duplex; Close unblocks both sides with ErrClosed; no progress for
// Config.Timeout gives ErrTimeout) but moves the bytes through a segment
// that both processes map, so a message costs two memcpys (the sender's
// copy in, the receiver's copy out, running concurrently slot by slot) and
// no system call on the fast path.
//
// The segment (a file in /dev/shm, unlinked as soon as both sides mapped
// it) holds one ring of Slots slots of SlotSize bytes per direction:
//
//	header page  magic, geometry, the two pids, the two closed flags
//	ring 0 ctl   creator -> opener: head, tail, receiver-sleeping and
//	             sender-sleeping words, each on its own 128-byte line,
//	             then one 64-byte header per slot (message length, piece)
//	ring 1 ctl   opener -> creator, the same
//	ring 0 data  Slots x SlotSize
//	ring 1 data  Slots x SlotSize
//
// head counts the slots the sender published, tail the slots the receiver
// released (both 32-bit, wrapping). A message of n bytes takes
// max(1, ceil(n/SlotSize)) consecutive slots; every slot header repeats the
// message length, so a receiver expecting another length stops before
// copying anything.
//
// Waiting: a side that finds the ring empty (or full) polls the counter a
// hundred times, letting the process's other goroutines run between polls
// (runtime.Gosched; on a box with fewer cores than ranks, longer busy
// polling starves the very peer being waited for), then announces
// that it sleeps (its sleeping word) and sleeps on the counter with a
// shared futex for at most 50 ms at a time. The other side issues
// FUTEX_WAKE after moving the counter only when the sleeping word says
// somebody sleeps, so a steady stream makes no system calls at all.
// Between naps the sleeper rechecks the closed flags and, every 100 ms,
// whether the peer process still exists (kill(pid, 0), and /proc/pid/stat
// for a zombie), so a killed peer is reported within a fraction of a second
// instead of at the deadline.

// Defaults of ShmConfig.
const (
	DefaultShmSlotSize = 256 << 10
	DefaultShmSlots    = 8

	// Bounds of FLAGCX_SHM_SLOT_SIZE and FLAGCX_SHM_SLOTS.
	MinShmSlotSize  = 1 << 10
	MaxShmSlotSize  = 256 << 20
	MaxShmSlots     = 1024
	MaxShmRingBytes = 1 << 30 // slots x slot size, per direction
)

// Environment variables read by ShmConfigFromEnv.
const (
	EnvShmSlotSize = "FLAGCX_SHM_SLOT_SIZE"
	EnvShmSlots    = "FLAGCX_SHM_SLOTS"
	EnvShmDisable  = "FLAGCX_SHM_DISABLE"
)

// DefaultShmDir is where segments are created.
const DefaultShmDir = "/dev/shm"

// ShmConfig tunes shared-memory links. The creator of a segment decides
// its geometry; the other side reads it from the segment, so ranks with
// different settings still interoperate.
type ShmConfig struct {
	// SlotSize is the bytes of one ring slot (FLAGCX_SHM_SLOT_SIZE), rounded
	// up to a multiple of 64. Larger messages stream through the ring slot
	// by slot.
	SlotSize int
	// Slots is the number of slots of each ring (FLAGCX_SHM_SLOTS).
	Slots int
	// Disable forces TCP between ranks of one host (FLAGCX_SHM_DISABLE=1).
	Disable bool
	// Dir is the tmpfs directory for segments (default /dev/shm).
	Dir string
}

// DefaultShmConfig: 8 slots of 256 KiB per direction (4 MiB of /dev/shm
// per pair of ranks), enabled, in /dev/shm.
func DefaultShmConfig() ShmConfig {
	return ShmConfig{SlotSize: DefaultShmSlotSize, Slots: DefaultShmSlots, Dir: DefaultShmDir}
}

// ShmConfigFromEnv reads FLAGCX_SHM_SLOT_SIZE, FLAGCX_SHM_SLOTS and
// FLAGCX_SHM_DISABLE on top of DefaultShmConfig.
func ShmConfigFromEnv() (ShmConfig, error) { return ShmConfigFromLookup(os.LookupEnv) }

// ShmConfigFromLookup is ShmConfigFromEnv with the variables read through
// lookup. Unset or empty variables keep their defaults; malformed ones give
// one error wrapping ErrConfig that lists them all.
//
//	FLAGCX_SHM_SLOT_SIZE  bytes per slot, K/M suffix allowed (1K..256M, default 256K)
//	FLAGCX_SHM_SLOTS      slots per direction (1..1024, default 8); slots x size <= 1 GiB
//	FLAGCX_SHM_DISABLE    1 (or true) forces TCP between ranks of one host
func ShmConfigFromLookup(lookup func(string) (string, bool)) (ShmConfig, error) {
	sc := DefaultShmConfig()
	var errs []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	bad := func(name, val, allowed string) {
		errs = append(errs, fmt.Errorf("%w: %s=%q: %s", ErrConfig, name, val, allowed))
	}
	if v, ok := get(EnvShmSlotSize); ok {
		n, err := parseBytes(v)
		if err != nil || n < MinShmSlotSize || n > MaxShmSlotSize {
			bad(EnvShmSlotSize, v, "allowed is a byte count from 1K to 256M such as 262144, 256K or 1M (K/M are 1024-based)")
		} else {
			sc.SlotSize = n
		}
	}
	if v, ok := get(EnvShmSlots); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxShmSlots {
			bad(EnvShmSlots, v, fmt.Sprintf("allowed is a whole number from 1 to %d", MaxShmSlots))
		} else {
			sc.Slots = n
		}
	}
	if v, ok := get(EnvShmDisable); ok {
		switch strings.ToLower(v) {
		case "1", "true", "yes", "on":
			sc.Disable = true
		case "0", "false", "no", "off":
			sc.Disable = false
		default:
			bad(EnvShmDisable, v, "allowed are 1 (use TCP between ranks of one host) and 0")
		}
	}
	if len(errs) == 0 && sc.Slots*roundShmSlot(sc.SlotSize) > MaxShmRingBytes {
		errs = append(errs, fmt.Errorf("%w: %s=%d x %s=%d is more than 1 GiB per direction: lower one of them",
			ErrConfig, EnvShmSlots, sc.Slots, EnvShmSlotSize, sc.SlotSize))
	}
	if len(errs) > 0 {
		return DefaultShmConfig(), errors.Join(errs...)
	}
	return sc, nil
}

func roundShmSlot(n int) int { return (max(n, MinShmSlotSize) + 63) &^ 63 }

// ErrShmUnavailable: the two sides agreed not to use shared memory (one of
// them disabled it, /dev/shm is missing or full, mapping failed, ...). The
// connection the setup ran over is still in step: use TCP.
var ErrShmUnavailable = errors.New("shared memory unavailable")

// BootID identifies the running kernel (/proc/sys/kernel/random/boot_id);
// "" where it cannot be read. Two processes share memory only when their
// host names and boot ids are equal.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pidNamespace names this process's pid namespace ("" if unknown): the
// liveness check kill(peer, 0) is only meaningful inside one namespace.
func pidNamespace() string {
	s, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return s
}

// Setup messages, JSON frames over the pair's authenticated connection.
//
//	creator -> opener  shmOffer   (the segment's path, or why there is none)
//	opener -> creator  shmAnswer  (mapped it, or why not); creator unlinks
//	creator -> opener  shmVerdict (only when both succeeded so far)
type shmOffer struct {
	Path  string `json:"path,omitempty"`
	Pid   int    `json:"pid"`
	PidNS string `json:"pidns"`
	Err   string `json:"err,omitempty"`
}

type shmAnswer struct {
	Pid   int    `json:"pid"`
	PidNS string `json:"pidns"`
	Err   string `json:"err,omitempty"`
}

type shmVerdict struct {
	Err string `json:"err,omitempty"`
}

const maxShmSetupMsg = 4096

// SetupShmLink turns an authenticated connection to a process of this host
// into a ShmLink. Both sides call it at the same point of their protocol,
// one with creator true (it creates the segment), the other false.
//
// The creator makes a segment in sc.Dir (0600, random name), sends its
// path, waits until the opener has mapped it and unlinks it, so nothing is
// left behind if a process dies later. When either side cannot (or, with
// sc.Disable, will not) share memory, both get an error wrapping
// ErrShmUnavailable with the reason and c stays usable: fall back to TCP.
// Other errors mean c failed.
//
// c is only used during the setup; the ShmLink does not need it afterwards.
func SetupShmLink(c *Conn, creator bool, cfg Config, sc ShmConfig) (*ShmLink, error) {
	if creator {
		return setupShmCreator(c, cfg, sc)
	}
	return setupShmOpener(c, cfg, sc)
}

func sendJSON(c *Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Send(b)
}

func recvJSON(c *Conn, v any) error {
	b, err := c.RecvMsg(maxShmSetupMsg)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("hostnet: shared-memory setup with %s: malformed message: %v: %w", c.RemoteAddr(), err, ErrProtocol)
	}
	return nil
}

func unavailable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrShmUnavailable, fmt.Sprintf(format, args...))
}

func setupShmCreator(c *Conn, cfg Config, sc ShmConfig) (*ShmLink, error) {
	offer := shmOffer{Pid: os.Getpid(), PidNS: pidNamespace()}
	var link *ShmLink
	if sc.Disable {
		offer.Err = fmt.Sprintf("pid %d has %s=1", offer.Pid, EnvShmDisable)
	} else if l, err := createShm(cfg, sc); err != nil {
		offer.Err = fmt.Sprintf("pid %d: %v", offer.Pid, err)
	} else {
		link, offer.Path = l, l.path
	}
	giveUp := func() {
		if link != nil {
			link.Close() // unlinks the file if still there
		}
	}
	if err := sendJSON(c, offer); err != nil {
		giveUp()
		return nil, err
	}
	var ans shmAnswer
	err := recvJSON(c, &ans)
	if link != nil {
		link.unlink() // mapped by both, or never will be
	}
	switch {
	case err != nil:
		giveUp()
		return nil, err
	case offer.Err != "":
		return nil, unavailable("%s", offer.Err)
	case ans.Err != "":
		giveUp()
		return nil, unavailable("%s", ans.Err)
	}
	var verdict shmVerdict
	if got := link.attachedPid(); got != ans.Pid || ans.PidNS != offer.PidNS {
		verdict.Err = fmt.Sprintf("pid %d did not map the segment pid %d created (found pid %d in it): the processes see different %s", ans.Pid, offer.Pid, got, sc.dir())
	}
	if err := sendJSON(c, verdict); err != nil {
		giveUp()
		return nil, err
	}
	if verdict.Err != "" {
		giveUp()
		return nil, unavailable("%s", verdict.Err)
	}
	link.peerPid = ans.Pid
	return link, nil
}

func setupShmOpener(c *Conn, cfg Config, sc ShmConfig) (*ShmLink, error) {
	var offer shmOffer
	if err := recvJSON(c, &offer); err != nil {
		return nil, err
	}
	ans := shmAnswer{Pid: os.Getpid(), PidNS: pidNamespace()}
	var link *ShmLink
	switch {
	case offer.Err != "":
		ans.Err = "the creator has no segment"
	case sc.Disable:
		ans.Err = fmt.Sprintf("pid %d has %s=1", ans.Pid, EnvShmDisable)
	case offer.PidNS != ans.PidNS:
		ans.Err = fmt.Sprintf("pids %d and %d live in different pid namespaces (%q, %q), so neither could tell whether the other died", offer.Pid, ans.Pid, offer.PidNS, ans.PidNS)
	default:
		l, err := openShm(offer.Path, cfg, offer.Pid)
		if err != nil {
			ans.Err = fmt.Sprintf("pid %d: %v", ans.Pid, err)
		} else {
			link = l
		}
	}
	giveUp := func() {
		if link != nil {
			link.Close()
		}
	}
	if err := sendJSON(c, ans); err != nil {
		giveUp()
		return nil, err
	}
	switch {
	case offer.Err != "":
		return nil, unavailable("%s", offer.Err)
	case ans.Err != "":
		return nil, unavailable("%s", ans.Err)
	}
	var verdict shmVerdict
	if err := recvJSON(c, &verdict); err != nil {
		giveUp()
		return nil, err
	}
	if verdict.Err != "" {
		giveUp()
		return nil, unavailable("%s", verdict.Err)
	}
	return link, nil
}

func (sc ShmConfig) dir() string {
	if sc.Dir == "" {
		return DefaultShmDir
	}
	return sc.Dir
}
