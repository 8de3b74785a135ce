// Package ipc owns the wire between fluffy's CLI and its kernel: a unix
// socket private to the user, frames of a 4-byte big-endian length then
// one JSON message, a versioned hello, request/response with ids and
// cancellation, and server-pushed events with topic subscriptions.
//
// Trust: the socket lives in a 0700 directory with mode 0600, and on top
// of that the server reads each peer's credentials with SO_PEERCRED and
// refuses any other uid, telling a RefusalRecorder so the kernel can audit
// it. The client checks the server's uid the same way.
//
// Delivery: each connection has a bounded outgoing queue. The server never
// blocks on a peer: when a peer's queue is full (it stopped reading) or a
// frame write takes longer than WriteTimeout, the server closes that
// connection (slow consumer). Events are therefore delivered in order and
// completely, or the connection ends; they are never silently dropped.
//
// The message catalogue grows through Mux: the kernel registers a Handler
// per method name. docs/ipc.md specifies the wire format.
package ipc
