package approval

// The fence of a worker's claim, the same for every leased row: an execution and an outbox
// message, claimed by attempt number, and an inbox event, claimed by lease token. A claim
// holds its row while the row still carries the claim's own number or token and is still in
// the status the claim put it in; a lease that ran out and was claimed again changes the
// first, a report or an operator the second. A worker whose claim no longer holds writes
// nothing (docs/invariants.md, invariants 3 and 5).

// holds reports, as ECONFLICT, that the claim mine on the row id of kind no longer holds it:
// current is the number or token the row carries now and active whether it is still in the
// claimed status, both as read under the row's lock. The zero value of T is no claim.
func holds[T comparable](kind, id string, mine, current T, active bool) error {
	var none T
	if mine != none && mine == current && active {
		return nil
	}
	return claimLost(kind, id, mine)
}

// claimLost is the ECONFLICT of a worker whose claim mine on the row id of kind was lost. A
// lease token is a secret of its holder and is not named.
func claimLost[T comparable](kind, id string, mine T) error {
	if n, ok := any(mine).(int); ok {
		return Errorf(ECONFLICT, "attempt %d no longer holds %s %s", n, kind, id)
	}
	return Errorf(ECONFLICT, "the claim on %s %s was lost", kind, id)
}
