package lockproto

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/consullock/terraform-provider-consullock/internal/consul"
	"github.com/consullock/terraform-provider-consullock/internal/testenv"
)

// The hold (acquire, renew, judge, release, destroy) is package
// concurrency's, tested there (concurrency/door_test.go); the tests here
// are of the protocol, against one real agent.
var agent *testenv.Agent

func TestMain(m *testing.M) {
	code := testenv.RunWithAgent(m, &agent)
	os.Exit(code)
}

// holdTest is a client with the management token, a key of the test's own
// and a context bounded to a minute.
func holdTest(t *testing.T) (*consul.Client, string, context.Context) {
	c, err := consul.New(consul.Settings{Address: agent.Addr, Token: agent.ManagementToken})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, testenv.UniquePrefix(t.Name()) + "/.lock", ctx
}
