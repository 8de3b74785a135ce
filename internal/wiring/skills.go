package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fluffy-agent/fluffy/internal/audit"
	"github.com/fluffy-agent/fluffy/internal/netproxy"
	"github.com/fluffy-agent/fluffy/internal/sandbox/docker"
	"github.com/fluffy-agent/fluffy/internal/secret"
	"github.com/fluffy-agent/fluffy/internal/skill"
	"github.com/fluffy-agent/fluffy/internal/tool"
	"github.com/fluffy-agent/fluffy/internal/tool/router"
	"github.com/fluffy-agent/fluffy/internal/tool/skilltool"
	"github.com/fluffy-agent/fluffy/internal/userenv"
)

// SkillRoots are the folders the skills of a session over ws come from
// (docs/skills.md): the assistant workspace's skills/, the person's
// ~/.config/fluffy/skills/ (where installs go too) and
// ws/.fluffy/skills/.
func SkillRoots(u *userenv.Env, ws string) []skill.Root {
	aws, err := AssistantWorkspace(u)
	if err != nil {
		aws = ""
	}
	return skill.Roots(aws, filepath.Dir(u.UserSkillsDir()), ws)
}

// grantedSkills are the skills a session over ws sees: those discovered,
// an installed one cut to what the person granted it and one that fails
// its pin check left out (skill.Installed.ApplyGrants). When the record
// of installs cannot be read, the person's scope is left out whole: an
// installed skill must not run with what it was never granted.
func grantedSkills(u *userenv.Env, ws string) skill.Set {
	set := skill.Discover(SkillRoots(u, ws))
	inst, err := u.InstalledSkills()
	if err != nil {
		set.Problems = append(set.Problems, skill.Problem{File: u.UserSkillsDir(), Msg: "left out: the record of installed skills cannot be read: " + err.Error()})
		set.Skills = slices.DeleteFunc(set.Skills, func(s skill.Skill) bool { return s.Scope == skill.ScopeUser })
		return set
	}
	out, refused := inst.ApplyGrants(set.Skills)
	set.Skills = out
	for _, err := range refused {
		set.Problems = append(set.Problems, skill.Problem{File: u.UserSkillsDir(), Msg: "left out: " + err.Error()})
	}
	return set
}

// sessionSkills are grantedSkills, logging what they leave out.
func sessionSkills(u *userenv.Env, ws string, log *slog.Logger) skill.Set {
	set := grantedSkills(u, ws)
	for _, p := range set.Problems {
		log.Warn("skill", "problem", p.String())
	}
	return set
}

// skillsPrompt is the kernel's Skills hook: the list of the skills a
// session over ws sees, for its system prompt.
func skillsPrompt(u *userenv.Env, log *slog.Logger) func(string) string {
	return func(ws string) string {
		return skill.PromptList(sessionSkills(u, ws, log).Skills)
	}
}

// registerSkills adds skill.load and skill.run to reg for the session
// over ws: the skills are discovered again at each call, the shared
// folder is the session's own (skillShared), and the
// assistant's memory folder is mounted when there is one. A skill with a
// Dockerfile is built on the session's engine, or in a native session on
// the engine of its image skills (engines), which its run then runs on.
func registerSkills(u *userenv.Env, reg *tool.Registry, ws, session string, runtime func() string, engines *skillEngines, rec router.Recorder, log *slog.Logger) error {
	o := skilltool.Options{
		Skills:    func() skill.Set { return grantedSkills(u, ws) },
		Workspace: ws,
		Runtime:   runtime,
		// A native session's image skills run on the container engine.
		ImageRuntime: func() string {
			if rt := runtime(); rt == "native" {
				return imageEngine(rt)
			}
			return ""
		},
	}
	o.Image = func(ctx context.Context, s skill.Skill) (string, error) {
		ref, built, err := skillImage(ctx, u, runtime(), s, func(ctx context.Context, name string) (*docker.Runtime, error) {
			return engines.runtime(ctx, u, session, name)
		})
		if err != nil || !built {
			return ref, err
		}
		log.Info("skill image built for a run", "session", session, "skill", s.Name, "image", ref)
		if rec != nil {
			p := audit.SkillImage{Skill: s.Name, Dir: s.Dir, Dockerfile: s.Manifest.Image.Dockerfile, Image: ref}
			if _, err := rec.Append(ctx, audit.Entry{Session: session, Kind: audit.KindSkillImage, Actor: "kernel", Payload: p}); err != nil {
				return "", fmt.Errorf("recording the build of skill %q's image: %w", s.Name, err)
			}
		}
		return ref, nil
	}
	if sh := newSkillShared(u); sh.root != "" {
		o.Shared = func() (string, error) { return sh.make(session) }
	}
	if aws, err := AssistantWorkspace(u); err == nil {
		if fi, err := os.Stat(filepath.Join(aws, "memory")); err == nil && fi.IsDir() {
			o.Memory = filepath.Join(aws, "memory")
		}
	}
	if err := skilltool.Register(reg, o); err != nil {
		return err
	}
	log.Debug("skill tools registered", "session", session)
	return nil
}

// skillImage is a run's image for s in a session of runtime: built on
// that runtime's engine, or for a session whose sandboxes are not
// containers on the engine shared returns (the one the run will run on),
// when no image carries the key of s's current build context (its
// Dockerfile and folder), so a change applied to them is built before
// the run that follows; built says it was.
func skillImage(ctx context.Context, u *userenv.Env, runtime string, s skill.Skill, shared func(context.Context, string) (*docker.Runtime, error)) (ref string, built bool, err error) {
	var rt *docker.Runtime
	if runtime == "docker" || runtime == "podman" {
		if rt, err = engine(ctx, u, runtime); err != nil {
			return "", false, err
		}
		defer rt.Close()
	} else {
		name := imageEngine(runtime)
		if rt, err = shared(ctx, name); err != nil {
			return "", false, fmt.Errorf("skill %q runs in the image built from its %s, on the container engine (%s) in a %s session: %w", s.Name, s.Manifest.Image.Dockerfile, name, runtime, err)
		}
	}
	sb, err := skillImages(u, rt.Client())
	if err != nil {
		return "", false, err
	}
	ref, built, err = sb.Ensure(ctx, s)
	if err != nil {
		return "", false, fmt.Errorf("building the image of skill %q: %w", s.Name, err)
	}
	return ref, built, nil
}

// skillsWantSecrets reports whether a skill of the person's scopes (the
// assistant's and ~/.config/fluffy/skills, whose skills may hold
// credentials) declares credentials: the kernel then has a secret broker
// even without configured uses. A skill added while the kernel runs
// counts from its next start.
func skillsWantSecrets(u *userenv.Env) bool {
	// What the manifests ask, not what is granted: a grant made while
	// the kernel runs takes effect at the next run.
	for _, s := range skill.Discover(SkillRoots(u, "")).Skills {
		if len(s.Manifest.Credentials) > 0 {
			return true
		}
	}
	return false
}

// confined hands a skill's run the credentials its manifest lists, each
// a declared use decided by the policy (and the person on approve) and
// recorded as secret.use; none of the person's configured uses.
func (s *sessionSecrets) confined(ctx context.Context, call string, creds []tool.Credential) (router.SandboxSecrets, error) {
	start := time.Now()
	in := make([]secret.Use, len(creds))
	for i, c := range creds {
		u, err := secret.NewUse(c.Ref, c.As, c.Name, c.Bind, []string{skilltool.RunName}, nil)
		if err != nil {
			return router.SandboxSecrets{}, fmt.Errorf("%w: %w", ErrSecretRefused, err)
		}
		in[i] = u
	}
	rules := make([]string, len(in))
	for i, u := range in {
		rule, err := s.decide(ctx, call, u)
		if err != nil {
			return router.SandboxSecrets{}, err
		}
		rules[i] = rule
	}
	return s.handOut(ctx, call, in, rules, start)
}

// SkillNetworkRule is the rule a proxy verdict names when it refuses a
// destination outside a skill's manifest.
const SkillNetworkRule = "skill.network"

// confinedEgress starts call's proxy for a skill's run: a destination
// outside hosts (the manifest's network) is refused whatever the policy
// says; one inside it is decided by the live policy as any command's.
func (n *sessionNet) confinedEgress(ctx context.Context, call string, hosts []string) (router.Egress, error) {
	if len(hosts) == 0 {
		return nil, nil
	}
	cn := n.forCall(ctx, call)
	decide := func(pctx context.Context, host string, port int) netproxy.Verdict {
		if !skill.HostAllowed(hosts, host, port) {
			return netproxy.Verdict{Rule: SkillNetworkRule, Reason: fmt.Sprintf("%s is not in the skill's network (its manifest names %v)", net.JoinHostPort(host, fmt.Sprint(port)), hosts)}
		}
		return cn.decide(pctx, host, port)
	}
	return n.startProxy(ctx, call, decide, namesLoopback(hosts))
}

// skillShared holds the sessions' /tmp/shared folders, one per session
// under the cache directory's skills-shared/; a session's is removed
// when it ends (kernel.Revoker).
type skillShared struct{ root string }

func newSkillShared(u *userenv.Env) skillShared {
	if cache := u.CacheDir(); cache != "" {
		return skillShared{root: filepath.Join(cache, "skills-shared")}
	}
	return skillShared{}
}

// make creates session's folder (0700) and returns it.
func (s skillShared) make(session string) (string, error) {
	if s.root == "" || session == "" || filepath.Base(session) != session || session[0] == '.' {
		return "", fmt.Errorf("no shared folder for session %q", session)
	}
	dir := filepath.Join(s.root, session)
	return dir, os.MkdirAll(dir, 0o700)
}

// EndSession removes session's folder.
func (s skillShared) EndSession(session string) {
	if s.root == "" || session == "" || filepath.Base(session) != session || session[0] == '.' {
		return
	}
	_ = os.RemoveAll(filepath.Join(s.root, session))
}
