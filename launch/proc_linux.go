package launch

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// setProcAttr makes the kernel kill a rank when the launcher dies, so that
// no rank outlives a launcher that was killed outright.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// procStopped reports whether process pid is stopped: by a signal
// (SIGSTOP, SIGTSTP: state T) or by a debugger (t). Its state follows the
// command's name in /proc/PID/stat, and the name may hold anything,
// parentheses and spaces included: it is found after the last ')'.
func procStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] == 'T' || s[i+2] == 't'
}
