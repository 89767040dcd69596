// Package vendorsim is the Go side of the emulated vendor runtimes that
// `make vendorsim` builds from the C sources in this directory, so that
// tests and the conformance runner can execute vendor plugins without
// vendor hardware. The emulators themselves are C (see README.md): a
// shared core (core/) under NVIDIA's CUDA runtime, NCCL and NVML
// (nvidia/), Kunlunxin's XPU runtime and BKCL (kunlunxin/), Cambricon's
// CNRT and CNCL (cambricon/), MetaX's MACA runtime and MCCL (metax/), and
// the verbs of the IB net plugin (ibverbs/). This package holds the
// variables the emulators read, where the emulated NVIDIA libraries are
// (FindNvidia, RepoRoot; internal/testkit finds every vendor's), and the
// emulators' tests.
//
// An emulator library exports `int flagcxVendorsimEmulated = 1` and a
// `flagcxVendorsimDescription` string: whoever loads one must say so in its
// output (docs/architecture.md, decision 8).
package vendorsim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Environment variables read by the emulators (once per process).
const (
	EnvDevices       = "FLAGCX_VENDORSIM_DEVICES"        // emulated devices per process, default 8
	EnvTimeout       = "FLAGCX_VENDORSIM_TIMEOUT"        // seconds without progress before an error, default 60
	EnvTopology      = "FLAGCX_VENDORSIM_TOPOLOGY"       // nvlink (default), pcie or none
	EnvSlotBytes     = "FLAGCX_VENDORSIM_SLOT_BYTES"     // collective slot per rank (default from nranks)
	EnvMailboxBytes  = "FLAGCX_VENDORSIM_MAILBOX_BYTES"  // p2p mailbox per ordered pair (default from nranks)
	EnvCheckPointers = "FLAGCX_VENDORSIM_CHECK_POINTERS" // 0 lets collectives take unregistered host memory
	EnvDebug         = "FLAGCX_VENDORSIM_DEBUG"          // 1 prints error reasons to stderr
)

// Variables through which the nvidia plugin finds its vendor libraries.
const (
	EnvNvidiaCudart = "FLAGCX_NVIDIA_CUDART"
	EnvNvidiaNCCL   = "FLAGCX_NVIDIA_NCCL"
	EnvNvidiaNVML   = "FLAGCX_NVIDIA_NVML"
)

// ErrNotBuilt is returned when the emulator libraries are missing.
var ErrNotBuilt = errors.New("vendorsim libraries not built: run make first (make vendorsim)")

// NvidiaLibs are the paths of the emulated NVIDIA libraries.
type NvidiaLibs struct {
	Cudart   string // libcudart.so.13
	Cudart12 string // libcudart.so.12
	NCCL     string // libnccl.so.2
	NVML     string // libnvidia-ml.so.1
}

// Env returns the FLAGCX_NVIDIA_* assignments that point the nvidia plugin
// at these emulators.
func (l NvidiaLibs) Env() []string {
	return []string{
		EnvNvidiaCudart + "=" + l.Cudart,
		EnvNvidiaNCCL + "=" + l.NCCL,
		EnvNvidiaNVML + "=" + l.NVML,
	}
}

// RepoRoot walks up from dir to the directory that holds go.mod.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		d = parent
	}
}

// FindNvidia locates the emulated NVIDIA libraries under
// <repo>/build/vendorsim/nvidia, starting the search for the repository
// root at dir. It fails with ErrNotBuilt when any library is missing.
func FindNvidia(dir string) (NvidiaLibs, error) {
	root, err := RepoRoot(dir)
	if err != nil {
		return NvidiaLibs{}, err
	}
	d := filepath.Join(root, "build", "vendorsim", "nvidia")
	l := NvidiaLibs{
		Cudart:   filepath.Join(d, "libcudart.so.13"),
		Cudart12: filepath.Join(d, "libcudart.so.12"),
		NCCL:     filepath.Join(d, "libnccl.so.2"),
		NVML:     filepath.Join(d, "libnvidia-ml.so.1"),
	}
	for _, p := range []string{l.Cudart, l.Cudart12, l.NCCL, l.NVML} {
		if _, err := os.Stat(p); err != nil {
			return NvidiaLibs{}, fmt.Errorf("%w: %s is missing", ErrNotBuilt, p)
		}
	}
	return l, nil
}
