package kernel

import "github.com/fluffy-agent/fluffy/internal/llm"

// resumer is a model whose position in a conversation is state of its
// own: a scripted model (replay.Provider) must continue its script where
// a resumed session stopped rather than start it over. Resume receives
// the persisted conversation (every model turn is saved as it ends, so
// the conversation is the persisted position) and fails when the model
// cannot continue it.
type resumer interface {
	Resume(history []llm.Message) error
}

// resumeModel positions p after the conversation's model turns, when p
// keeps such a position. A model that cannot continue the conversation is
// a model fault: the session stays paused and resumable.
func resumeModel(p llm.Provider, st *state) *Fault {
	r, ok := p.(resumer)
	if !ok || st.Agent == nil {
		return nil
	}
	if err := r.Resume(st.Agent.Messages); err != nil {
		return &Fault{Class: FaultModel, Message: err.Error(),
			Fix: "resume the session with the model (or script) it was started with, or close it (its change set is kept until then)"}
	}
	return nil
}
