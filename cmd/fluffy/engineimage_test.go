package main

import (
	"context"
	"time"

	"github.com/moby/moby/client"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
)

func init() {
	scriptCmds["engine-images"] = engineImages
}

// engineImages is the script command "engine-images LABEL=VALUE": it
// succeeds when the container engine of the script's DOCKER_HOST (else
// Docker's socket) has an image carrying the label. "! engine-images"
// asserts it has none: a script checks what is gone from the engine
// itself where another script's garbage collection, on the same engine,
// may have removed it first.
func engineImages(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: engine-images LABEL=VALUE")
	}
	opts := []client.Opt{client.FromEnv}
	if h := ts.Getenv("DOCKER_HOST"); h != "" {
		opts = append(opts, client.WithHost(h))
	}
	cli, err := client.New(opts...)
	ts.Check(err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Podman fails a whole list when an image goes meanwhile (another
	// script's GC): asked again as fluffy asks.
	imgs, err := docker.ListAgain(ctx, func(ctx context.Context) (client.ImageListResult, error) {
		return cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", args[0])})
	})
	ts.Check(err)
	ts.Logf("engine-images: %d image(s) labelled %s", len(imgs.Items), args[0])
	if neg && len(imgs.Items) > 0 {
		ts.Fatalf("the engine still has %d image(s) labelled %s", len(imgs.Items), args[0])
	}
	if !neg && len(imgs.Items) == 0 {
		ts.Fatalf("the engine has no image labelled %s", args[0])
	}
}
