// Package client is the Go client of approvald's HTTP API (docs/http-api.md), for the
// machines that ask for approvals (a deploy pipeline, a refund service), the people who
// decide them, and operators.
//
// Retries are where duplicates are born, so the client does them itself, and only where the
// contract makes them safe:
//
//   - CreateApproval sends the operation key as Idempotency-Key and keeps it on every
//     attempt; the server makes one approval per key and answers a repeat with the stored
//     response, which CreateResult.Replayed reports. A rerun of a pipeline with the same key
//     finds the approval the first run made. A create is also retried after the 409 with
//     Retry-After the server answers when the database cut a lock wait short.
//   - Reads, votes (a repeated vote changes nothing), cancels (a repeat finds the approval
//     cancelled) and execution reports (ordered by version) are retried after network
//     errors, 408, 429 and 5xx.
//   - The operator's POSTs are retried only when the request cannot have been acted on: no
//     connection was made, or the server answered 429 or 503.
//
// The wait before a retry is exponential with full jitter (see Retry), or the answer's
// Retry-After (whole seconds or an HTTP-date), and is never begun when it would end after
// the context's deadline. Other answers are final and come back at once as *Error, which
// carries the RFC 9457 problem (type, title, status, detail and any extension member);
// branch on Error.Code:
//
//	var e *client.Error
//	if errors.As(err, &e) && e.Code() == client.CodeMismatch { ... }
//
// WaitForDecision follows an approval by long-polling until it is decided. SignStandardWebhook
// and VerifyExecution sign webhooks for approvald's intake and verify its execution calls.
//
// The package defines its own types for the API's JSON, rather than importing the server's
// domain package, so that its types are exactly the wire contract (which is extended, never
// changed: unknown fields are ignored). It does import the repository's webhook package, so
// that signing and verifying are the code the server runs; that package, and the domain
// package it uses, depend on the standard library only, so the client stays a light import.
package client
