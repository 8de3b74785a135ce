package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/rogpeppe/go-internal/testscript"
)

func init() {
	scriptCmds["chrome"] = chrome
}

// axeVersion is the axe-core scripts/deps.sh installs; axePath where.
const axeVersion = "4.14.1"

func axePath() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(cache, "fluffy-test", "axe-core-"+axeVersion, "node_modules", "axe-core", "axe.min.js")
}

// chromes are the scripts' headless browsers, one per script, closed
// when it ends.
var chromes sync.Map // *testscript.TestScript → context.Context

// chromeTimeout bounds one chrome command: a page that never shows what
// the script waits for fails the script rather than hanging it.
const chromeTimeout = 60 * time.Second

// chrome drives headless Chromium (Debian's chromium package; see
// scripts/deps.sh) from a script:
//
//	chrome open URL|PATH          navigate (a PATH goes to $WEB)
//	chrome wait SELECTOR          until it is visible
//	chrome waittext SELECTOR RE   until its text matches RE
//	chrome text SELECTOR          its text to stdout
//	chrome html SELECTOR          its outer HTML to stdout
//	chrome click SELECTOR         click it (a submit button submits its form)
//	chrome type SELECTOR TEXT     type into a field
//	chrome key KEYS               press keys on the page (j, k, a...)
//	chrome focused                the focused element's outer HTML to stdout
//	chrome screenshot NAME        the whole page as NAME.png in the test's artifact directory
//	chrome phone                  emulate a phone's screen from now on
//	chrome overflow               stdout "overflows" when the page is wider than the window, else "fits"
//	chrome axe                    run axe-core on the page; fails on serious or critical violations
//	chrome scripts                whether the model's script ran: stdout "pwned" when window.pwned is set, else "inert"
//	chrome authenticator          add a virtual passkey authenticator to the tab (CTAP2, internal, resident keys, user verified)
//	chrome clearcookies           forget every cookie, as a new browser would
func chrome(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 {
		ts.Fatalf("usage: chrome ACTION ARGS...")
	}
	bctx := browserFor(ts)
	ctx, cancel := context.WithTimeout(bctx, chromeTimeout)
	defer cancel()
	base := "http://" + ts.Getenv("WEB")
	arg := func(i int) string {
		if len(args) <= i {
			ts.Fatalf("chrome %s: missing argument %d", args[0], i)
		}
		return args[i]
	}
	css := func(i int) chromedp.CSS { return chromedp.CSS(arg(i)) }
	var err error
	switch args[0] {
	case "open":
		u := arg(1)
		if strings.HasPrefix(u, "/") {
			u = base + u
		}
		err = chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitReady(chromedp.CSS("body")))
	case "wait":
		err = chromedp.Do(ctx, chromedp.WaitVisible(css(1)))
	case "waittext":
		// A click on a link may still be replacing the document when
		// the query runs ("No node with given id found"): such errors
		// are retried until the deadline like a text that does not
		// match yet, and the last one is reported.
		re := regexp.MustCompile(arg(2))
		for {
			text, qerr := chromedp.Run(ctx, chromedp.Text(css(1), chromedp.NodeVisible))
			if qerr == nil && re.MatchString(text) {
				err = nil
				break
			}
			if ctx.Err() != nil && err != nil {
				break // keep the last real reason, not the deadline's
			}
			err = qerr
			if qerr == nil {
				err = fmt.Errorf("no match for %q in %q", arg(2), text)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
				continue
			}
			break
		}
	case "text":
		var text string
		text, err = chromedp.Run(ctx, chromedp.Text(css(1), chromedp.NodeVisible))
		fmt.Fprintln(ts.Stdout(), text)
	case "html":
		var html string
		html, err = chromedp.Run(ctx, chromedp.OuterHTML(css(1)))
		fmt.Fprintln(ts.Stdout(), html)
	case "click":
		err = chromedp.Do(ctx, chromedp.Click(css(1), chromedp.NodeVisible))
	case "type":
		err = chromedp.Do(ctx, chromedp.SendKeys(css(1), arg(2), chromedp.NodeVisible))
	case "key":
		err = chromedp.Do(ctx, chromedp.KeyEvent(arg(1)))
	case "focused":
		var html string
		html, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement ? document.activeElement.outerHTML : ""`))
		fmt.Fprintln(ts.Stdout(), html)
	case "screenshot":
		var img []byte
		img, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			name := filepath.Join(artifactDir(ts), arg(1)+".png")
			err = os.WriteFile(name, img, 0o644)
			fmt.Fprintln(ts.Stdout(), name)
		}
	case "phone":
		// A phone's screen: 390 CSS pixels wide, touch.
		err = chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	case "overflow":
		// Whether the page is wider than its window (it scrolls
		// sideways): stdout "overflows" or "fits".
		var wide bool
		wide, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
		if wide {
			fmt.Fprintln(ts.Stdout(), "overflows")
		} else {
			fmt.Fprintln(ts.Stdout(), "fits")
		}
	case "axe":
		err = runAxe(ctx, ts)
	case "scripts":
		var pwned bool
		pwned, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`!!window.pwned`))
		if pwned {
			fmt.Fprintln(ts.Stdout(), "pwned")
		} else {
			fmt.Fprintln(ts.Stdout(), "inert")
		}
	case "authenticator":
		err = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			if _, err := cdp.Call(ctx, t, webauthn.Enable, webauthn.EnableParams{}); err != nil {
				return err
			}
			_, err := cdp.Call(ctx, t, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
				Options: &webauthn.VirtualAuthenticatorOptions{Protocol: webauthn.AuthenticatorProtocolCtap2,
					Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
					HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true}})
			return err
		}))
	case "clearcookies":
		err = chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, network.ClearBrowserCookies, cdp.Empty{})
			return err
		}))
	default:
		ts.Fatalf("chrome: unknown action %q", args[0])
	}
	if err != nil && !neg {
		ts.Fatalf("chrome %s: %v", strings.Join(args, " "), err)
	}
	if err == nil && neg {
		ts.Fatalf("chrome %s: succeeded, want a failure", strings.Join(args, " "))
	}
}

// browserFor starts the script's browser on first use.
func browserFor(ts *testscript.TestScript) context.Context {
	if v, ok := chromes.Load(ts); ok {
		return v.(context.Context)
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		ts.Fatalf("chrome: no chromium (scripts/deps.sh installs Debian's chromium package)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.UserDataDir(filepath.Join(ts.Getenv("WORK"), ".chromium")), chromedp.WindowSize(1280, 900))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		ts.Fatalf("chrome: start chromium: %v", err)
	}
	ts.Defer(func() {
		bcancel()
		acancel()
		chromes.Delete(ts)
	})
	chromes.Store(ts, bctx)
	return bctx
}

// artifactDir is the test's artifact directory ($ARTIFACTS, which
// scriptSetup sets for browser scripts; go test -artifacts keeps it), or
// the script's work directory.
func artifactDir(ts *testscript.TestScript) string {
	if a := ts.Getenv("ARTIFACTS"); a != "" {
		return a
	}
	return ts.Getenv("WORK")
}

// runAxe runs axe-core in the page (by the DevTools protocol, which the
// page's Content-Security-Policy does not govern) and fails on a serious
// or critical violation, listing each.
func runAxe(ctx context.Context, ts *testscript.TestScript) error {
	src, err := os.ReadFile(axePath())
	if err != nil {
		return fmt.Errorf("axe-core is not installed (run scripts/deps.sh): %w", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](string(src))); err != nil {
		return fmt.Errorf("load axe-core: %w", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(" "))}))))`, chromedp.EvalAwaitPromise))
	if err != nil {
		return err
	}
	var vs []struct {
		ID, Impact, Help string
		Nodes            []string
	}
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		return err
	}
	var bad []string
	for _, v := range vs {
		fmt.Fprintf(ts.Stdout(), "%s %s: %s (%s)\n", v.Impact, v.ID, v.Help, strings.Join(v.Nodes, ", "))
		if v.Impact == "serious" || v.Impact == "critical" {
			bad = append(bad, v.ID)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("serious accessibility violations: %s", strings.Join(bad, ", "))
	}
	return nil
}
