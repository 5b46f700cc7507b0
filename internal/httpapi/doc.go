// Package httpapi is fencelock's transports over the lock service: the
// HTTP/JSON API of docs/API.md, which framed connections (internal/framing)
// also carry, and the binary calls of framed connections
// (internal/callcodec). One route table (table, in routes.go) binds each
// path to its method, its operation, what its caller needs (an auth.Need)
// and its codecs; the router, the binary calls, the guard and the framing
// budgets all read it, and a test checks that every route declares what it
// needs and that docs/API.md lists the table.
//
// A call travels: the router finds the route; Config.Authorizer, if set,
// sees the call (Call); the guard authenticates it to a principal once the
// cluster's ACLs are on; the route decodes the request, the guard checks
// the principal against the route's Need, the service runs the operation,
// the guard audits and redacts the answer, and the route encodes it, or
// writes the *service.Error with its status (api.Status). No lock rule and
// no ACL decision is made here.
package httpapi
