package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// hostCPU is the machine's CPU time counters (in clock ticks) from the
// first line of /proc/stat, to say how busy the machine was during a
// benchmark run and how much of it the hypervisor gave to other guests
// ("steal"): on a shared VM, steal makes runs slow that the code did not.
type hostCPU struct {
	busy, idle, steal uint64
	ok                bool
}

// readHostCPU reads /proc/stat; off Linux, or when it cannot be read, the
// result is not ok and the report leaves the column empty.
func readHostCPU() hostCPU {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return hostCPU{}
	}
	return parseHostCPU(line)
}

// parseHostCPU reads "cpu user nice system idle iowait irq softirq steal ...".
func parseHostCPU(line string) hostCPU {
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return hostCPU{}
	}
	var v [8]uint64
	for i := range v {
		n, err := strconv.ParseUint(fields[i+1], 10, 64)
		if err != nil {
			return hostCPU{}
		}
		v[i] = n
	}
	user, nice, system, idle, iowait, irq, softirq, steal := v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
	return hostCPU{busy: user + nice + system + irq + softirq, idle: idle + iowait, steal: steal, ok: true}
}

// usageSince says what share of the machine's CPU time since before was
// busy and stolen, e.g. "64% / 1%"; "-" when either reading failed.
func (h hostCPU) usageSince(before hostCPU) string {
	if !h.ok || !before.ok {
		return "-"
	}
	busy, idle, steal := h.busy-before.busy, h.idle-before.idle, h.steal-before.steal
	total := busy + idle + steal
	if total == 0 {
		return "-"
	}
	pct := func(n uint64) float64 { return 100 * float64(n) / float64(total) }
	return fmt.Sprintf("%.0f%% / %.0f%%", pct(busy), pct(steal))
}
