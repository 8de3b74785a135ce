package doctor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ProbeCommand is the hidden first argument under which the fluffy binary
// runs a probe (ProbeMain) instead of the CLI. The binary's main must hand
// over to ProbeMain when it sees it.
const ProbeCommand = "__doctor-probe"

// ProbeMain runs inside the namespaces that probe created and reports by
// exit status (0 works, 1 does not, with the reason on stderr).
func ProbeMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "probe: missing name")
		return 2
	}
	var err error
	switch args[0] {
	case "userns":
		// Being here means clone(CLONE_NEWUSER|CLONE_NEWNS) worked; make
		// sure the namespace is usable: we are root in it and can make
		// our mounts private.
		if os.Geteuid() != 0 {
			err = fmt.Errorf("not root inside the namespace (euid %d)", os.Geteuid())
		} else {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
	case "overlay":
		if len(args) != 2 {
			err = fmt.Errorf("overlay probe needs a directory")
			break
		}
		err = probeOverlay(args[1])
	default:
		err = fmt.Errorf("unknown probe %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func probeOverlay(dir string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// A tmpfs keeps upper and work dirs on a filesystem that supports
	// overlay's requirements whatever the host's /tmp is.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	lower, upper, work, merged := filepath.Join(dir, "l"), filepath.Join(dir, "u"), filepath.Join(dir, "w"), filepath.Join(dir, "m")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "f"), []byte("lower"), 0o600); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	if err := os.WriteFile(filepath.Join(merged, "f"), []byte("upper"), 0o600); err != nil {
		return fmt.Errorf("write through overlay: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "f")); err != nil || string(b) != "upper" {
		return fmt.Errorf("write did not land in the upper layer: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(lower, "f")); err != nil || string(b) != "lower" {
		return fmt.Errorf("write reached the lower layer: %q, %v", b, err)
	}
	return nil
}

func decodeJSON(resp *http.Response, v any) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("engine answered %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
