package plugin

import (
	"errors"
	"fmt"
	"slices"
)

// Action is a step of the lifecycle a person or the runtime takes.
type Action string

// The actions and the states each may start from.
const (
	// ActEnable: a person turns an installed (or disabled, stopped,
	// failed) plugin on, or approves an enabled one's changed files; the
	// runtime may start it.
	ActEnable Action = "enable"
	// ActDisable: a person, the runtime (crashes) or a changed digest
	// turns it off.
	ActDisable Action = "disable"
	// ActStart, ActStop, ActFail: the runtime's own steps.
	ActStart Action = "start"
	ActStop  Action = "stop"
	ActFail  Action = "fail"
	// ActRemove forgets the plugin; a running one is disabled first.
	ActRemove Action = "rm"
)

// ErrState is matched by the error of an action the current state does
// not allow.
var ErrState = errors.New("plugin: not allowed in this state")

// StateError is an action refused in a state.
type StateError struct {
	Plugin string
	Action Action
	State  State
}

func (e *StateError) Error() string {
	return fmt.Sprintf("plugin %s: cannot %s while %s", e.Plugin, e.Action, e.State)
}

// Is makes every StateError match ErrState.
func (e *StateError) Is(target error) bool { return target == ErrState }

// from are the states each action may start from, and to where it leads
// (ActRemove leads nowhere: the record goes).
var (
	from = map[Action][]State{
		ActEnable:  {Installed, Enabled, Disabled, Stopped, Failed},
		ActDisable: {Installed, Enabled, Running, Stopped, Failed},
		ActStart:   {Enabled, Stopped, Failed},
		ActStop:    {Running},
		ActFail:    {Running, Enabled},
		ActRemove:  {Discovered, Verified, Installed, Disabled, Stopped, Failed},
	}
	to = map[Action]State{
		ActEnable: Enabled, ActDisable: Disabled, ActStart: Running, ActStop: Stopped, ActFail: Failed,
	}
)

// Next is the state action leads to from s, or a *StateError. A running
// plugin is not enabled again: its server runs the files it started
// with, so a person disables it first.
func Next(name string, s State, a Action) (State, error) {
	allowed, ok := from[a]
	if !ok || !slices.Contains(allowed, s) {
		return s, &StateError{Plugin: name, Action: a, State: s}
	}
	return to[a], nil
}
