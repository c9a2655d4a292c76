//go:build !race

package hostspeed

const raceEnabled = false
