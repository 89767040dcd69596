package loader

import (
	"os/exec"
	"syscall"
)

// setProbeAttr puts a probe child in a process group of its own, so that a
// hung child is killed with what it started, and has the kernel kill it
// when the listing process dies (Ctrl-C), so no probe outlives it.
func setProbeAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
