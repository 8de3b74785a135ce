package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// confirm asks a yes/no question on stderr (stdout may be a pipe) and
// reads the answer from stdin; only y or yes agrees.
func confirm(a *App, question string) (bool, error) {
	fmt.Fprintf(a.Stderr, "%s [y/N] ", question)
	line, err := bufio.NewReader(io.LimitReader(a.Stdin, 1024)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	ans := strings.ToLower(strings.TrimSpace(line))
	if line == "" || !strings.HasSuffix(line, "\n") {
		fmt.Fprintln(a.Stderr)
	}
	return ans == "y" || ans == "yes", nil
}

// confirmUnless is confirm, or yes without asking when the person said so
// already (--yes).
func confirmUnless(a *App, yes bool, question string) (bool, error) {
	if yes {
		return true, nil
	}
	return confirm(a, question)
}
