package config

import (
	"go.yaml.in/yaml/v3"

	"github.com/fluffy-agent/fluffy/internal/units"
)

// Secrets configures the credential broker (docs/secrets.md). Every key
// is the person's: a project file can neither declare a use of a secret
// nor move a store.
type Secrets struct {
	// TTL is how long a value stays in the daemon's memory for a session
	// after it was fetched; 0 (the default) keeps it until the session
	// ends.
	TTL units.Duration `yaml:"ttl" scope:"user"`
	// Age is the age-encrypted store (secret://age/NAME).
	Age SecretsAge `yaml:"age"`
	// Bitwarden is the bw CLI backend (secret://bitwarden/ITEM/FIELD).
	Bitwarden SecretsBitwarden `yaml:"bitwarden"`
	// Uses declare which secret enters which commands' sandboxes, and
	// how.
	Uses []SecretUse `yaml:"uses" scope:"user"`
}

// SecretsAge configures the age store.
type SecretsAge struct {
	// Store is the encrypted file; "" is secrets/store.age in the data
	// directory.
	Store string `yaml:"store" scope:"user"`
	// Identity is an age identity file; "" means the store is encrypted
	// with a passphrase.
	Identity string `yaml:"identity" scope:"user"`
	// PassphraseFile is where the daemon reads the passphrase: a file
	// (0600), /dev/fd/N, or credential:NAME (a systemd credential,
	// $CREDENTIALS_DIRECTORY/NAME). "" asks on the terminal when there is
	// one.
	PassphraseFile string `yaml:"passphrase_file" scope:"user"`
}

// SecretsBitwarden configures the bw CLI backend.
type SecretsBitwarden struct {
	// Enabled turns the backend on.
	Enabled bool `yaml:"enabled" scope:"user"`
	// BW is the bw executable; "" finds bw in PATH.
	BW string `yaml:"bw" scope:"user"`
	// AppData is bw's data directory (BITWARDENCLI_APPDATA_DIR); "" is
	// secrets/bitwarden in the data directory.
	AppData string `yaml:"appdata" scope:"user"`
	// PasswordFile is where the master password is read: a file (0600),
	// /dev/fd/N, or credential:NAME (a systemd credential). "" asks on
	// the terminal when there is one.
	PasswordFile string `yaml:"password_file" scope:"user"`
}

// SecretUse declares one use of a secret.
type SecretUse struct {
	// Ref names the secret: secret://BACKEND/PATH, env:VAR, file:PATH.
	Ref string `yaml:"ref"`
	// As is how it enters the sandbox: env, file, stdin or proxy.
	As string `yaml:"as"`
	// Name is the environment variable (env, proxy) or the file's name
	// in the secrets tmpfs (file).
	Name string `yaml:"name"`
	// Bind are the hosts the egress proxy puts the value in for (proxy).
	Bind []string `yaml:"bind"`
	// Commands are the programs whose command lines get it.
	Commands []string `yaml:"commands"`
	// Templates limits it to these sandbox templates; empty is any.
	Templates []string `yaml:"templates"`
	// TLS lets the egress proxy terminate HTTPS to the bind hosts to swap
	// the value in (proxy; opt-in, docs/network.md).
	TLS bool `yaml:"tls"`
}

// UnmarshalYAML decodes a declaration strictly (unknown keys are errors).
func (u *SecretUse) UnmarshalYAML(n *yaml.Node) error {
	type plain SecretUse
	return strictDecode(n, (*plain)(u), "secret use")
}
