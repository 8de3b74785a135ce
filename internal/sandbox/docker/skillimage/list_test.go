package skillimage

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/moby/moby/client"

	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/skill"
)

// fakeEngine answers the Engine API's image and container lists: the
// first failing image lists fail as Podman's does when an image goes
// while it lists, later ones answer an empty list.
func fakeEngine(t *testing.T, failing int32) (*client.Client, *atomic.Int32) {
	t.Helper()
	var lists atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/images/json"):
			if lists.Add(1) <= failing {
				w.WriteHeader(http.StatusInternalServerError)
				w.Write([]byte(`{"message":"reading image \"489cca4c\": locating image with ID \"489cca4c\": image not known"}`))
				return
			}
			w.Write([]byte(`[]`))
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			w.Write([]byte(`[]`))
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			w.Header().Set("Api-Version", "1.44")
			w.Write([]byte(`OK`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.New(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithAPIVersion("1.44"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, &lists
}

// A list that fails because an image went meanwhile is asked again; one
// that keeps failing is an error naming the list.
func TestGCListsAgain(t *testing.T) {
	load := func(string) (skill.Skill, error) { return skill.Skill{}, nil }
	cli, lists := fakeEngine(t, 2)
	b := New(Options{Client: cli, LockDir: t.TempDir()})
	if _, err := b.GC(context.Background(), GCOptions{Load: load}); err != nil {
		t.Fatalf("GC after two failed lists: %v", err)
	}
	if n := lists.Load(); n != 3 {
		t.Errorf("image lists = %d, want 3", n)
	}

	cli, lists = fakeEngine(t, 1000)
	b = New(Options{Client: cli, LockDir: t.TempDir()})
	_, err := b.GC(context.Background(), GCOptions{Load: load})
	if err == nil || !strings.Contains(err.Error(), "listing images") {
		t.Fatalf("GC with every list failing: %v", err)
	}
	if n := lists.Load(); n != docker.ListAttempts {
		t.Errorf("image lists = %d, want %d", n, docker.ListAttempts)
	}
}
