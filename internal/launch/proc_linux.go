package launch

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill a rank when the launcher dies, so that
// no rank outlives a launcher that was killed outright.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
