//go:build goolm

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/fluffy-agent/fluffy/internal/channel/matrix/matrixtest"
)

// The Matrix scripts' homeserver and person devices, per script.
var (
	mxMu      sync.Mutex
	mxServers = map[*testscript.TestScript]*matrixtest.Dendrite{}
	mxDevices = map[*testscript.TestScript]map[string]*matrixtest.Person{}
	// mxLate holds the keys "mx sendlate" kept back, per script and device.
	mxLate = map[*testscript.TestScript]map[string][]func(context.Context, string) error{}
)

func init() {
	scriptCmds["dendrite"] = dendriteCmd
	scriptCmds["mx"] = mxCmd
}

// dendriteCmd is "dendrite start" (a homeserver on loopback for this
// script; $HS is its URL), "dendrite account NAME" (password
// NAME-password) and "dendrite plaintext TEXT" (TEXT is in one of its
// database files; negate it to check messages are encrypted at rest).
func dendriteCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: dendrite start | account NAME | plaintext TEXT")
	}
	mxMu.Lock()
	hs := mxServers[ts]
	mxMu.Unlock()
	switch args[0] {
	case "start":
		dir := filepath.Join(ts.Getenv("WORK"), "dendrite")
		ts.Check(os.MkdirAll(dir, 0o700))
		hs, err := matrixtest.Start(context.Background(), dir)
		ts.Check(err)
		mxMu.Lock()
		mxServers[ts] = hs
		mxMu.Unlock()
		ts.Defer(func() {
			mxMu.Lock()
			for _, p := range mxDevices[ts] {
				p.Close()
			}
			delete(mxDevices, ts)
			delete(mxServers, ts)
			delete(mxLate, ts)
			mxMu.Unlock()
			hs.Stop()
		})
		ts.Setenv("HS", hs.URL)
	case "account":
		if hs == nil || len(args) != 2 {
			ts.Fatalf("usage: dendrite account NAME, after dendrite start")
		}
		_, err := hs.CreateAccount(context.Background(), args[1], args[1]+"-password")
		ts.Check(err)
	case "plaintext":
		if hs == nil || len(args) != 2 {
			ts.Fatalf("usage: dendrite plaintext TEXT, after dendrite start")
		}
		hits, err := hs.Contains(args[1])
		ts.Check(err)
		if neg && len(hits) > 0 {
			ts.Fatalf("%q is in the homeserver's %s", args[1], strings.Join(hits, ", "))
		}
		if !neg && len(hits) == 0 {
			ts.Fatalf("%q is in none of the homeserver's databases", args[1])
		}
	default:
		ts.Fatalf("dendrite: unknown subcommand %q", args[0])
	}
}

// mxCmd drives person devices (mautrix clients with their own E2EE
// devices):
//
//	mx login DEV USER [verified]     log a device in (verified: cross-sign it)
//	mx room DEV VAR USER...          an encrypted room inviting USERs; $VAR is its id
//	mx joined DEV ROOM USER          wait until USER joined ROOM
//	mx send DEV ROOM TEXT            send a message
//	mx sendlate DEV ROOM TEXT        send a message whose key is shared with no one yet
//	mx sharekey DEV USER             send the keys sendlate kept back to USER's devices
//	mx wait DEV ROOM REGEXP [thread] wait for a message matching REGEXP (in a thread);
//	                                 stdout: its event id, then its text
//	mx react DEV ROOM EVENT KEY [encrypted]
//	mx verify DEV USER [ROOM]        ask USER's devices to verify DEV by emoji (the
//	                                 device confirms what it is shown), by to-device
//	                                 messages or in ROOM; sets TXN;
//	                                 stdout: the emoji once shown
//	mx sas DEV TXN done|cancelled    wait until the verification ends so
//	mx trusts DEV USER               fail unless DEV has verified USER
func mxCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: mx login|room|joined|send|sendlate|sharekey|wait|react|verify|sas|trusts DEV ...")
	}
	ctx := context.Background()
	mxMu.Lock()
	hs := mxServers[ts]
	dev := mxDevices[ts][args[1]]
	mxMu.Unlock()
	if hs == nil {
		ts.Fatalf("mx: no homeserver: dendrite start first")
	}
	if args[0] != "login" && dev == nil {
		ts.Fatalf("mx: no device %q: mx login first", args[1])
	}
	switch args[0] {
	case "login":
		if len(args) < 3 {
			ts.Fatalf("usage: mx login DEV USER [verified]")
		}
		name := strings.TrimPrefix(strings.Split(args[2], ":")[0], "@")
		dir := filepath.Join(ts.Getenv("WORK"), "mx", args[1])
		ts.Check(os.MkdirAll(dir, 0o700))
		p, err := matrixtest.Login(ctx, hs.URL, args[2], name+"-password", dir, len(args) > 3 && args[3] == "verified")
		ts.Check(err)
		mxMu.Lock()
		if mxDevices[ts] == nil {
			mxDevices[ts] = map[string]*matrixtest.Person{}
		}
		mxDevices[ts][args[1]] = p
		mxMu.Unlock()
	case "room":
		room, err := dev.CreateEncryptedRoom(ctx, "fluffy", args[3:]...)
		ts.Check(err)
		ts.Setenv(args[2], string(room))
	case "joined":
		for i := 0; !dev.Joined(ctx, id.RoomID(args[2]), args[3]); i++ {
			if i == 600 {
				ts.Fatalf("%s did not join %s", args[3], args[2])
			}
			time.Sleep(100 * time.Millisecond)
		}
	case "send":
		_, err := dev.Send(ctx, id.RoomID(args[2]), args[3])
		ts.Check(err)
	case "sendlate":
		_, share, err := dev.SendKeyLater(ctx, id.RoomID(args[2]), args[3])
		ts.Check(err)
		mxMu.Lock()
		if mxLate[ts] == nil {
			mxLate[ts] = map[string][]func(context.Context, string) error{}
		}
		mxLate[ts][args[1]] = append(mxLate[ts][args[1]], share)
		mxMu.Unlock()
	case "sharekey":
		mxMu.Lock()
		shares := mxLate[ts][args[1]]
		delete(mxLate[ts], args[1])
		mxMu.Unlock()
		if len(shares) == 0 {
			ts.Fatalf("mx sharekey: %s kept no key back (mx sendlate first)", args[1])
		}
		for _, share := range shares {
			ts.Check(share(ctx, args[2]))
		}
	case "wait":
		re := regexp.MustCompile(args[3])
		thread := len(args) > 4 && args[4] == "thread"
		e, err := dev.Wait(ctx, id.RoomID(args[2]), 2*time.Minute, func(e *event.Event) bool {
			m, ok := e.Content.Parsed.(*event.MessageEventContent)
			if !ok {
				return false
			}
			text := m.Body
			if m.NewContent != nil {
				text = m.NewContent.Body
			}
			return re.MatchString(text) && (!thread || m.RelatesTo != nil && m.RelatesTo.GetThreadParent() != "")
		})
		ts.Check(err)
		m := e.Content.AsMessage()
		fmt.Fprintf(ts.Stdout(), "%s\nencrypted=%v\n%s\n", e.ID, e.Mautrix.WasEncrypted, m.Body)
	case "react":
		_, err := dev.React(ctx, id.RoomID(args[2]), id.EventID(args[3]), args[4], len(args) > 5 && args[5] == "encrypted")
		ts.Check(err)
	case "verify":
		var txn id.VerificationTransactionID
		var err error
		if len(args) > 3 {
			txn, err = dev.VerifyInRoom(ctx, id.RoomID(args[3]), args[2])
		} else {
			txn, err = dev.Verify(ctx, args[2])
		}
		ts.Check(err)
		ts.Setenv("TXN", string(txn))
		s, err := dev.WaitSAS(ctx, txn, 2*time.Minute, func(s matrixtest.SAS) bool { return len(s.Emoji) > 0 || s.Cancelled != "" })
		ts.Check(err)
		fmt.Fprintf(ts.Stdout(), "%s\n", strings.Join(s.Emoji, "  "))
	case "sas":
		s, err := dev.WaitSAS(ctx, id.VerificationTransactionID(args[2]), 2*time.Minute, func(s matrixtest.SAS) bool { return s.Done || s.Cancelled != "" })
		ts.Check(err)
		if got := map[bool]string{true: "done", false: "cancelled"}[s.Done]; got != args[3] {
			ts.Fatalf("verification %s: %s (%s %s), want %s", args[2], got, s.Cancelled, s.Reason, args[3])
		}
	case "trusts":
		ok, err := dev.TrustsUser(ctx, args[2])
		ts.Check(err)
		if !ok {
			ts.Fatalf("%s does not trust %s", args[1], args[2])
		}
	default:
		ts.Fatalf("mx: unknown subcommand %q", args[0])
	}
}
