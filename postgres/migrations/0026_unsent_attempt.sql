-- 0026_unsent_attempt: the attempt that holds an execution without having started its call
-- (docs/invariants.md, invariant 5). The claim sets it to the attempt it starts; the runner
-- clears it to 0 in a committed write right before the call is sent, renewing the lease in the
-- same statement. A running execution whose lease ran out while unsent_attempt still names
-- its attempt provably never reached the target, and the next claim sends it as an ordinary
-- attempt; any other expired lease may have reached the target and is taken over as uncertain.
-- Rows that exist already hold 0: an expired lease among them stays uncertain, as before.
ALTER TABLE executions ADD COLUMN unsent_attempt integer NOT NULL DEFAULT 0;
