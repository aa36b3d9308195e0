// Package logformat is the -log-format flag every consullock program
// takes: text (log/slog's key=value lines) or json (its JSON handler), one
// event per line with the same keys in both: time, level, msg, then the
// event's attributes. The controller logs json by default, the runner and
// status text.
package logformat

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// Format is a log format: Text or JSON.
type Format string

const (
	Text Format = "text"
	JSON Format = "json"
)

// Var registers -log-format on fs into f, with default def.
func Var(fs *flag.FlagSet, f *Format, def Format) {
	*f = def
	fs.Var(f, "log-format", fmt.Sprintf("log format: text or json (keys time, level, msg, then the event's; default %s)", def))
}

// String implements flag.Value.
func (f *Format) String() string { return string(*f) }

// Set implements flag.Value: "text" or "json".
func (f *Format) Set(s string) error {
	switch Format(s) {
	case Text, JSON:
		*f = Format(s)
		return nil
	}
	return fmt.Errorf("%q: want text or json", s)
}

// New returns a logger that writes the events from level on to w in
// format f.
func New(w io.Writer, f Format, level slog.Leveler) *slog.Logger {
	o := &slog.HandlerOptions{Level: level}
	if f == JSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// Messages is where a program writes the messages meant for a person
// (status's diagnostics, one per line): w itself in text; in json a
// writer that logs each line as one ERROR event, its msg the line without
// prefix.
func Messages(w io.Writer, f Format, prefix string) io.Writer {
	if f != JSON {
		return w
	}
	return &lineLogger{log: New(w, JSON, slog.LevelDebug), prefix: prefix}
}

type lineLogger struct {
	mu     sync.Mutex
	log    *slog.Logger
	prefix string
	buf    bytes.Buffer
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil { // no newline yet: keep the start of the line
			l.buf.Reset()
			l.buf.WriteString(line)
			return len(p), nil
		}
		if line = strings.TrimSpace(strings.TrimPrefix(line, l.prefix)); line != "" {
			l.log.Log(context.Background(), slog.LevelError, line)
		}
	}
}
