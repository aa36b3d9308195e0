package faults

import "testing"

func TestTokenFromEnvReadsTheFencingToken(t *testing.T) {
	t.Setenv("CONSUL_LOCK_INDEX", "1") // LockIndex: not what the store fences on
	t.Setenv(EnvFencingToken, "4711")
	if got, err := TokenFromEnv(); err != nil || got != 4711 {
		t.Fatalf("TokenFromEnv = %d, %v; want 4711", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "x"} {
		t.Setenv(EnvFencingToken, bad)
		if _, err := TokenFromEnv(); err == nil {
			t.Errorf("%s=%q: want an error", EnvFencingToken, bad)
		}
	}
}
