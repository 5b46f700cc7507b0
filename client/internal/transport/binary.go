package transport

import (
	"strconv"

	"github.com/fencelock/fencelock/api"
	"github.com/fencelock/fencelock/internal/callcodec"
)

// The hot calls — acquire, extend, release, check — go over a framed
// connection in the binary encoding of internal/callcodec when the server
// takes them that way (framing.Conn.Calls), which spares both ends JSON
// and the server an http.Request per call. Everything else, and every call
// to a server that does not list the path, goes as JSON; the answers are
// the same (the server runs one operation behind both).

// binaryBody is r's body in the binary encoding, or nil when r is not a
// hot call or a string of it is not UTF-8 (JSON replaces such bytes; the
// binary encoding refuses them, so such a call goes as JSON, to be read
// the same way over every transport).
func binaryBody(r *Request) []byte {
	switch q := r.Body.(type) {
	case api.AcquireRequest:
		if r.Path == api.PathAcquire && callcodec.ValidStrings(q.Key, q.Holder, q.RequestID, q.Mode) {
			return callcodec.AppendAcquire(make([]byte, 0, 32+len(q.Key)+len(q.Holder)+len(q.RequestID)), q)
		}
	case api.ExtendRequest:
		if r.Path == api.PathExtend && callcodec.ValidStrings(q.Key, q.Holder, q.RequestID) {
			return callcodec.AppendExtend(make([]byte, 0, 24+len(q.Key)+len(q.Holder)+len(q.RequestID)), q)
		}
	case api.ReleaseRequest:
		if r.Path == api.PathRelease && callcodec.ValidStrings(q.Key, q.Holder, q.RequestID) {
			return callcodec.AppendRelease(make([]byte, 0, 16+len(q.Key)+len(q.Holder)+len(q.RequestID)), q)
		}
	case nil:
		if r.Path != api.PathCheck || len(r.Query) != 2 {
			return nil
		}
		key := r.Query.Get(api.QueryKey)
		token, err := strconv.ParseUint(r.Query.Get(api.QueryToken), 10, 64)
		if err == nil && key != "" && callcodec.ValidStrings(key) {
			return callcodec.AppendCheck(nil, callcodec.CheckRequest{Key: key, Token: token})
		}
	}
	return nil
}

// DecodeBinary decodes a binary call's successful answer into out.
func DecodeBinary(data []byte, out any) error { return callcodec.DecodeAnswer(data, out) }
