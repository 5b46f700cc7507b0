// Package api is fencelock's wire contract: the paths, request and answer
// bodies, error codes, limits and query parameters of the HTTP API
// (docs/API.md), declared once. The server, the Go client, the CLI, the
// bench module and the test double all use these types, so a field cannot
// be spelled two ways; clients in other languages can read this file as
// the schema.
//
// Durations travel as integer milliseconds in fields ending in _ms. Every
// answer that is not 2xx is an Error. Unknown request fields are refused.
//
// The package has no dependencies beyond the standard library and does no
// I/O.
package api
