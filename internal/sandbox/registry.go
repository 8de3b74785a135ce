package sandbox

// GoProxyList is the GOPROXY of a sandbox whose Go commands may fetch
// modules from registry (a module proxy's URL): the person's module
// cache first when the sandbox has it (the file proxy GoCaches' seed
// mounts), so what is cached is never fetched, then the registry.
func GoProxyList(user UserCaches, registry string) string {
	if user[UserGoModCache] != "" {
		return "file://" + userGoModTarget + "/cache/download," + registry
	}
	return registry
}

// SetEnv returns env with each of kvs ("KEY=value") replacing every
// earlier entry of its key.
func SetEnv(env []string, kvs ...string) []string {
	for _, kv := range kvs {
		env = setEnv(env, kv)
	}
	return env
}
