//go:build !linux

package launch

import "os/exec"

func setProcAttr(cmd *exec.Cmd) {}

// procStopped cannot tell here: a stopped rank is not found (watchLeft
// still kills the ranks left GracePeriod after the survivors finished).
func procStopped(pid int) bool { return false }
