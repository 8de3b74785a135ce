package main

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

func init() { scriptCmds["ipc-raw"] = ipcRaw }

// ipcRaw speaks to the running kernel byte by byte, as a hostile local
// client could: ipc-raw PAYLOAD sends the hello, then PAYLOAD as one
// frame, exactly as given, and prints the payload of the frame that
// answers it.
func ipcRaw(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: ipc-raw PAYLOAD")
	}
	home := filepath.Join(ts.Getenv("XDG_DATA_HOME"), "fluffy")
	c, err := net.Dial("unix", ipc.SocketPath(ts.Getenv("XDG_RUNTIME_DIR"), home))
	ts.Check(err)
	defer c.Close()
	ts.Check(c.SetDeadline(time.Now().Add(30 * time.Second)))
	hello := fmt.Sprintf(`{"type":"hello","hello":{"min":%d,"max":%d,"name":"ipc-raw"}}`, ipc.MinProtocol, ipc.Protocol)
	ts.Check(ipc.WriteFrame(c, []byte(hello), 0))
	_, err = ipc.ReadFrame(c, 0)
	ts.Check(err)
	ts.Check(ipc.WriteFrame(c, []byte(args[0]), 0))
	b, err := ipc.ReadFrame(c, 0)
	ts.Check(err)
	fmt.Fprintf(ts.Stdout(), "%s\n", b)
}
