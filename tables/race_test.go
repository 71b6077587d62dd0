//go:build race

package tables

const raceEnabled = true
