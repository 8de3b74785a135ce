package docker_test

import (
	"context"
	"testing"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
)

// A sandbox run's first-use build leaves an existing base image alone,
// whatever it was built from (here the minimal test image): only
// 'image build base' replaces it.
func TestEnsureBasePresentKeepsExisting(t *testing.T) {
	rt := engine(t)
	ctx := context.Background()
	before, err := rt.Client().ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	res, err := docker.EnsureBasePresent(ctx, rt.Client(), docker.DebianOptions{Tag: testImage, LockDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	after, err := rt.Client().ImageInspect(ctx, testImage)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Cached || after.ID != before.ID || res.Content != before.Config.Labels[docker.LabelContent] {
		t.Errorf("EnsureBasePresent = %+v; image %s before, %s after", res, before.ID, after.ID)
	}
}
