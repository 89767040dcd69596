//go:build !linux

package launch

func nprocLimit() (int, bool) { return 0, false }

func userTasks(uid int) int { return 0 }
