//go:build goolm

package matrix

import (
	"context"
	"slices"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// A device counts as its user's when the user's self-signing key signed
// it under the master key first seen for the user (or one the bot
// verified): cross-signing is how a person verifies their own devices,
// and a master key that changes later is not trusted.
func trusted(t id.TrustState) bool {
	return t >= id.TrustStateCrossSignedTOFU
}

// trustedDevice reports whether an encrypted event came from a device
// its sender has cross-signed. The trust decryption recorded is checked
// again against freshly fetched keys when it says no: the person may
// have verified the device since the bot last fetched them.
func (c *Channel) trustedDevice(ctx context.Context, evt *event.Event) bool {
	if trusted(evt.Mautrix.TrustState) {
		return true
	}
	dev := evt.Mautrix.TrustSource
	if dev == nil {
		return false
	}
	c.mu.Lock()
	helper := c.helper
	c.mu.Unlock()
	if helper == nil {
		return false
	}
	mach := helper.Machine()
	devs, err := mach.FetchKeys(ctx, []id.UserID{evt.Sender}, true)
	if err != nil {
		return false
	}
	fresh, ok := devs[evt.Sender][dev.DeviceID]
	if !ok || fresh.IdentityKey != dev.IdentityKey {
		return false
	}
	t, err := mach.ResolveTrustContext(ctx, fresh)
	return err == nil && trusted(t)
}

// unverifiedDevices lists the devices of user that user has not
// cross-signed, from freshly fetched keys.
func (c *Channel) unverifiedDevices(ctx context.Context, user id.UserID) ([]id.DeviceID, error) {
	c.mu.Lock()
	helper := c.helper
	c.mu.Unlock()
	if helper == nil {
		return nil, errNotConnected
	}
	mach := helper.Machine()
	devs, err := mach.FetchKeys(ctx, []id.UserID{user}, true)
	if err != nil {
		return nil, err
	}
	var bad []id.DeviceID
	for did, d := range devs[user] {
		t, err := mach.ResolveTrustContext(ctx, d)
		if err != nil {
			return nil, err
		}
		if !trusted(t) {
			bad = append(bad, did)
		}
	}
	slices.Sort(bad)
	return bad, nil
}
