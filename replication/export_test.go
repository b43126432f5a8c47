package replication

// DecideWrite exposes the per-write decision of Decide to the external tests.
var DecideWrite = decideWrite
