// Command handoverchild is the command of the hand-over benchmarks: it
// records its start (with the CONSUL_LOCK_* it was given) and, when stdin
// ends or -sleep has passed, its end, in the record format of the runner
// tests' child (main_test.go helperMain). It imports nothing but the
// standard library's basics, so that its own start-up (about a millisecond)
// adds as little as a job's can to the hand-over measured: the test binary,
// the tests' child, takes several milliseconds to start, and that time
// would pad every variant of the benchmark alike.
//
//	handoverchild -record FILE -tag NAME [-wait-stdin | -sleep D]
package main

import (
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	record := flag.String("record", "", "file to append events to")
	tag := flag.String("tag", "", "name of this child in the record")
	waitStdin := flag.Bool("wait-stdin", false, "run until stdin ends")
	sleep := flag.Duration("sleep", 0, "how long to run")
	flag.Parse()
	write := func(kind string, extra ...string) {
		f, err := os.OpenFile(*record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			os.Stderr.WriteString("handoverchild: " + err.Error() + "\n")
			os.Exit(98)
		}
		fields := append([]string{kind, "tag=" + *tag, "at=" + strconv.FormatInt(time.Now().UnixNano(), 10)}, extra...)
		_, _ = f.WriteString(strings.Join(fields, " ") + "\n")
		_ = f.Close()
	}
	write("start",
		"index="+os.Getenv("CONSUL_LOCK_INDEX"), "token="+os.Getenv("CONSUL_LOCK_FENCING_TOKEN"),
		"session="+os.Getenv("CONSUL_LOCK_SESSION"), "held="+os.Getenv("CONSUL_LOCK_HELD"),
		"key="+os.Getenv("CONSUL_LOCK_KEY"), "pid="+strconv.Itoa(os.Getpid()),
		"run="+os.Getenv("CONSUL_LOCK_RUN_ID"), "attempt="+os.Getenv("CONSUL_LOCK_ATTEMPT"))
	if *waitStdin {
		_, _ = io.Copy(io.Discard, os.Stdin)
	} else {
		time.Sleep(*sleep)
	}
	write("end")
}
