package matrix

import "time"

// The IPC methods `fluffy matrix verify` calls on the running daemon
// (docs/ipc.md): VerifyListMethod → VerifyList; VerifyAnswerMethod,
// VerifyAnswerParams → VerifyAnswer.
const (
	VerifyListMethod   = "matrix.verify.list"
	VerifyAnswerMethod = "matrix.verify.answer"
)

// IPC error codes of VerifyAnswerMethod beside ipc's own.
const (
	// CodeUnknownVerification: no pending verification has that id.
	CodeUnknownVerification = "unknown_verification"
	// CodeNotComparable: the verification has no emoji to compare yet
	// (the person's client has not started SAS), or was confirmed.
	CodeNotComparable = "not_comparable"
)

// Verification states.
const (
	// StateRequested: a principal asked; the bot answered ready.
	StateRequested = "requested"
	// StateCompare: the emoji are there; the operator compares them
	// with the person's and confirms or cancels.
	StateCompare = "compare"
	// StateConfirmed: the operator confirmed; the bot waits for the
	// person's device to finish.
	StateConfirmed = "confirmed"
)

// Outcomes of an answer.
const (
	OutcomeVerified  = "verified"
	OutcomeCancelled = "cancelled"
	// OutcomePending: confirmed, but the person's device had not
	// finished when the answer returned; the audit log has the end.
	OutcomePending = "pending"
)

// PendingVerification is a verification of the bot's device a principal
// started, as the operator sees it.
type PendingVerification struct {
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	Principal string `json:"principal"`
	Device    string `json:"device"`
	Room      string `json:"room,omitempty"`
	State     string `json:"state"`
	// Emoji are the seven emoji with their names ("🐶 Dog"), Decimals
	// the three numbers: the person's client shows the same ones.
	Emoji    []string  `json:"emoji,omitempty"`
	Decimals []int     `json:"decimals,omitempty"`
	Started  time.Time `json:"started"`
	Expires  time.Time `json:"expires"`
	// MasterKey is the principal's master key as the bot has it now;
	// PinnedKey is set when it differs from the pinned (first seen)
	// one: confirming re-pins the principal to MasterKey.
	MasterKey string `json:"master_key,omitempty"`
	PinnedKey string `json:"pinned_key,omitempty"`
}

// VerifyList is VerifyListMethod's result.
type VerifyList struct {
	Verifications []PendingVerification `json:"verifications"`
}

// VerifyAnswerParams confirm (the emoji match) or cancel a verification.
type VerifyAnswerParams struct {
	ID      string `json:"id"`
	Confirm bool   `json:"confirm"`
}

// VerifyAnswer is VerifyAnswerMethod's result.
type VerifyAnswer struct {
	PendingVerification
	Outcome string `json:"outcome"`
	// Repinned: the confirmation made MasterKey the principal's pinned
	// master key in place of PinnedKey.
	Repinned bool   `json:"repinned,omitempty"`
	Reason   string `json:"reason,omitempty"`
}
