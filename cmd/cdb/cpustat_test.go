package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHostCPUSaysHowBusyTheMachineWasAndHowMuchWasStolen(t *testing.T) {
	before := parseHostCPU("cpu  1000 0 500 8000 0 0 0 500 0 0\n")
	// 400 ticks busy (300 user, 100 system), 500 idle, 100 stolen.
	after := parseHostCPU("cpu  1300 0 600 8450 50 0 0 600 0 0\n")
	assert.Equal(t, "40% / 10%", after.usageSince(before))

	assert.Equal(t, "-", parseHostCPU("cpu0 1 2 3 4 5 6 7 8").usageSince(before), "not the machine's line")
	assert.Equal(t, "-", parseHostCPU("cpu 1 2 3").usageSince(before), "too few fields")
	assert.Equal(t, "-", parseHostCPU("cpu x 2 3 4 5 6 7 8").usageSince(before), "not a number")
	assert.Equal(t, "-", before.usageSince(before), "no time passed")
}
