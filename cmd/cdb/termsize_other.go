//go:build !linux && !darwin

package main

import "os"

// terminalColumns cannot ask the terminal here: the caller's default holds.
func terminalColumns(*os.File) int { return 0 }
