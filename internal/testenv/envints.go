package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// EnvInts reads a comma-separated list of positive counts from the
// environment variable name (a benchmark's sizes, e.g. 3,10,30), else def.
func EnvInts(tb testing.TB, name string, def []int) []int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("%s=%q: want positive integers separated by commas, e.g. 3,10,30", name, v)
		}
		out = append(out, n)
	}
	return out
}
