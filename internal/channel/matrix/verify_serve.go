//go:build goolm

package matrix

import (
	"context"
	"errors"

	"github.com/fluffy-agent/fluffy/internal/ipc"
)

// RegisterVerify serves VerifyListMethod and VerifyAnswerMethod on mux
// for the daemon's Matrix channels (`fluffy matrix verify`).
func RegisterVerify(mux *ipc.Mux, chans []*Channel) error {
	list := func(context.Context, *ipc.Request) (any, error) {
		out := VerifyList{Verifications: []PendingVerification{}}
		for _, c := range chans {
			out.Verifications = append(out.Verifications, c.Verifications()...)
		}
		return out, nil
	}
	answer := func(ctx context.Context, r *ipc.Request) (any, error) {
		var p VerifyAnswerParams
		if err := r.Bind(&p); err != nil {
			return nil, err
		}
		for _, c := range chans {
			a, err := c.AnswerVerification(ctx, p.ID, p.Confirm)
			switch {
			case errors.Is(err, ErrUnknownVerification):
				continue
			case errors.Is(err, ErrNotComparable):
				return nil, ipc.Errorf(CodeNotComparable, "%v", err)
			case err != nil:
				return nil, err
			}
			return a, nil
		}
		return nil, ipc.Errorf(CodeUnknownVerification, "no pending verification %q (fluffy matrix verify lists them)", p.ID)
	}
	if err := mux.Handle(VerifyListMethod, list); err != nil {
		return err
	}
	return mux.Handle(VerifyAnswerMethod, answer)
}
