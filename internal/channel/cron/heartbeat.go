package cron

import (
	"strings"
)

// NothingToReport is the reply a heartbeat run ends with when nothing
// needs the person: the delivered prompt asks for exactly this, and the
// daemon sends a final reply equal to it (MetaQuietReply) nowhere.
const NothingToReport = "HEARTBEAT_OK"

// HeartbeatPrompt is the message a heartbeat run delivers: the person's
// checklist (HEARTBEAT.md, read afresh for each run) and how to say that
// nothing needs them.
func HeartbeatPrompt(checklist string) string {
	var b strings.Builder
	b.WriteString("This is a scheduled heartbeat. Work through the checklist below, one item at a time, ")
	b.WriteString("using your tools where an item asks you to look at something.\n\n")
	b.WriteString("Report to the person only what needs them: a decision, a problem, something they asked to be told. ")
	b.WriteString("If nothing does, reply with exactly " + NothingToReport + " and nothing else; that reply is not sent to anyone.\n\n")
	b.WriteString("Checklist (" + HeartbeatFile + "):\n\n")
	b.WriteString(checklist)
	b.WriteString("\n")
	return b.String()
}

// IsNothingToReport reports whether a heartbeat's final reply means
// "nothing to report": NothingToReport alone, ignoring surrounding space
// and a trailing full stop.
func IsNothingToReport(reply string) bool {
	return strings.TrimSuffix(strings.TrimSpace(reply), ".") == NothingToReport
}
