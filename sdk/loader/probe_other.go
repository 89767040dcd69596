//go:build !linux

package loader

import (
	"os/exec"
	"syscall"
)

// setProbeAttr puts a probe child in a process group of its own, so that a
// hung child is killed with what it started.
func setProbeAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
