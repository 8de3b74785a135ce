package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// SignatureNamespace is the SSH signature namespace of plugin
// signatures (ssh-keygen -Y sign -n): a signature made for another use
// (git commits, files) does not verify as a plugin's.
const SignatureNamespace = "fluffy-plugin"

// ErrSignature is matched by every failure to verify a plugin's
// signature: no trusted key made it, it is not over this digest, or
// ssh-keygen could not run.
var ErrSignature = errors.New("plugin: signature does not verify")

// SignedMessage is what a plugin's signature is over: its digest and a
// newline, as 'fluffy plugin digest DIR' prints it, so an author signs
// with
//
//	fluffy plugin digest DIR | ssh-keygen -Y sign -f KEY -n fluffy-plugin > DIR/fluffy-plugin.sig
func SignedMessage(digest string) []byte { return []byte(digest + "\n") }

// VerifySignature checks the SSH signature in sigFile over digest against
// the allowed-signers file (ssh-keygen's format: principals, then a
// public key, optionally namespaces="fluffy-plugin" and validity) and
// returns the principal whose key made it. It runs ssh-keygen -Y
// find-principals, then -Y verify for each principal found; every
// failure wraps ErrSignature.
func VerifySignature(ctx context.Context, sigFile, allowedSigners, digest string) (string, error) {
	if _, err := os.Stat(allowedSigners); err != nil {
		return "", fmt.Errorf("%w: the trusted keys: %w", ErrSignature, err)
	}
	find := exec.CommandContext(ctx, "ssh-keygen", "-Y", "find-principals", "-s", sigFile, "-f", allowedSigners)
	out, err := find.Output()
	if err != nil {
		return "", fmt.Errorf("%w: no key of %s made %s (%s)", ErrSignature, allowedSigners, sigFile, stderrOf(err))
	}
	for _, p := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if p == "" {
			continue
		}
		v := exec.CommandContext(ctx, "ssh-keygen", "-Y", "verify", "-f", allowedSigners, "-I", p, "-n", SignatureNamespace, "-s", sigFile)
		v.Stdin = bytes.NewReader(SignedMessage(digest))
		if v.Run() == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not a %s signature of %s by a trusted key", ErrSignature, sigFile, SignatureNamespace, digest)
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return err.Error()
}
