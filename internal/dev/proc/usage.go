package proc

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUSeconds is the CPU time (utime+stime, clock ticks of 1/100 s) process pid has used,
// from /proc: Linux only, an error elsewhere.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("CPU time of process %d: /proc/%d/stat has %d fields", pid, pid, len(f))
	}
	utime, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: utime: %w", pid, err)
	}
	stime, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: stime: %w", pid, err)
	}
	return (utime + stime) / 100, nil
}
