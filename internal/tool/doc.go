// Package tool owns what a model can call: the Tool type (a name, a
// description written for models, a JSON Schema for its input derived from
// a Go type, capability tags, and an execution class), the Registry, the
// strict decoding of a call's arguments with errors a model can act on,
// the normalization of the paths a call names into operation.Path, and the
// Sanitizer every result passes before it reaches the model.
//
// The router (the gate pipeline of "the life of a tool call") is built on
// these pieces: Registry.Lookup and Tool.Decode are step 1, Tool.Normalize
// with a Resolver is step 2, Tool.Run (fast path) or the sandbox with
// Tool.Execution().Template is step 6, and a Sanitizer stream is step 7.
//
// Schemas come from github.com/google/jsonschema-go, the library the
// official MCP Go SDK uses, so MCP tools fit the same registry. That
// library is the validation authority; this package adds a walk over the
// same schema only to word the first few problems for the model (field
// path, expected, got).
package tool
