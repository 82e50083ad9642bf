package backend

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// HostAvailable is the host memory the kernel can still give without swapping (Linux's
// MemAvailable, in bytes): the pure-Go backend's device memory for the memory policy.
func HostAvailable() (uint64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("backend: host memory: %w", err)
	}
	return parseMemAvailable(data)
}

// parseMemAvailable reads the "MemAvailable: N kB" line of /proc/meminfo.
func parseMemAvailable(meminfo []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 2 || string(fields[0]) != "MemAvailable:" {
			continue
		}
		kb, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil || kb > 1<<44 {
			return 0, fmt.Errorf("backend: host memory: MemAvailable %q is not a size in kB", fields[1])
		}
		return kb << 10, nil
	}
	return 0, errors.New("backend: host memory: /proc/meminfo has no MemAvailable line")
}
