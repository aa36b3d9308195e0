package holder

import "testing"

func TestHolder_String(t *testing.T) {
	for _, c := range []struct {
		h    Holder
		want string
	}{
		{Holder{Session: "s1"}, "session s1"},
		{Holder{Session: "s1", Node: "n1"}, `session s1 on node "n1"`},
		{Holder{Session: "s1", Node: "n1", FencingToken: 42}, `session s1 on node "n1" (fencing token 42)`},
	} {
		if got := c.h.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.h, got, c.want)
		}
	}
}
