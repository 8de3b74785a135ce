// Package arch owns fluffy's house rules as tests: every package has a doc
// comment, and imports respect the architecture's boundaries (the policy
// engine and the TDD machine never reach sandbox or container code; only the
// kernel wires the parts; nothing imports the CLI). It has no code of its
// own; new packages extend the tables in arch_test.go.
package arch
