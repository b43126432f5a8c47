package server_test

import (
	"sync"
	"testing"
)

// clusterTests holds the tests (and subtests) that run in cluster mode:
// startServer gives them a node of a 3-node cluster instead of a single
// server.
var clusterTests sync.Map // testing.TB -> struct{}

// clusterMode reports whether t runs in cluster mode.
func clusterMode(t testing.TB) bool {
	_, ok := clusterTests.Load(t)
	return ok
}

// TestBehaviourInACluster is the mode table: the server's behaviour tests,
// with the same assertions, against one node of a 3-node cluster (embedded
// NATS, replicas 3) instead of a single server. Every other node applies
// the same writes; the tests read and write through the first one.
//
// Most cases wait far more than they compute (one took 5.6 s of wall
// time for 2.0 s of CPU, most of it its cluster's start and stop): they
// run in parallel, two at a time on the two cores `make test` is sized for (go
// test's -parallel is GOMAXPROCS), once the serial cases are done. Each
// starts its own cluster on its own ports and directories, and none
// touches process-wide state. A case listed in serial is CPU-bound under the
// race detector (a large dataset through three nodes' materializers): it
// runs alone, as before.
func TestBehaviourInACluster(t *testing.T) {
	// The cases that run alone: CPU-bound under the race detector.
	serial := map[string]bool{
		"WALStaysBoundedUnderAStreamOfPushes":               true,
		"ScopedDevicesReceiveExactlyTheirValues":            true,
		"ScopeAddedWithoutResyncBesideAHundredThousandRows": true,
	}
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"PushThenPullAndSubscribe", TestPushThenPullAndSubscribe},
		{"ResendIsDuplicateWithOriginalResult", TestResendIsDuplicateWithOriginalResult},
		{"OptimisticRaceHasExactlyOneWinner", TestOptimisticRaceHasExactlyOneWinner},
		{"LWWHigherHLCWinsWhateverTheArrivalOrder", TestLWWHigherHLCWinsWhateverTheArrivalOrder},
		{"TimestampBeyondSkewBoundIsRefusedThenRestamped", TestTimestampBeyondSkewBoundIsRefusedThenRestamped},
		{"TenantsCannotSeeOrTouchEachOther", TestTenantsCannotSeeOrTouchEachOther},
		{"ModelScopeOfTokensLimitsTheFeed", TestModelScopeOfTokensLimitsTheFeed},
		{"SnapshotAndResyncAfterCompaction", TestSnapshotAndResyncAfterCompaction},
		{"OneTenantsChurnResyncsNoOther", TestAbuseOneTenantsChurnResyncsNoOther},
		{"ResendOlderThanTheLedgerIsExpired", TestResendOlderThanTheLedgerIsExpired},
		{"ConditionalWriteOnLWWModelIsRefusedWhenStale", TestConditionalWriteOnLWWModelIsRefusedWhenStale},
		{"BadInputsGetTheirDocumentedAnswerAndApplyNothing", TestBadInputsGetTheirDocumentedAnswerAndApplyNothing},
		{"HookAnswerIsReaskedWhenTheKeyChanged", TestHookAnswerIsReaskedWhenTheKeyChanged},
		{"UndeclaredModelsFollowTheAnnouncedDefault", TestUndeclaredModelsFollowTheAnnouncedDefault},
		{"OldWritesAreNotExpiredWithoutEviction", TestOldWritesAreNotExpiredWithoutEviction},
		{"RevokedTokenClosesItsSessions", TestRevokedTokenClosesItsSessions},
		{"WALStaysBoundedUnderAStreamOfPushes", TestWALStaysBoundedUnderAStreamOfPushes},
		{"ScopedDevicesReceiveExactlyTheirValues", TestScopedDevicesReceiveExactlyTheirValues},
		{"ScopeRevokedAndMovedWhileOffline", TestScopeRevokedAndMovedWhileOffline},
		{"RequestedSetIsRecordedOnChangeAndReadOnEveryNode", TestRequestedSetIsRecordedOnChangeAndReadOnEveryNode},
		{"ScopeAddedWithoutResyncBesideAHundredThousandRows", TestScopeAddedWithoutResyncBesideAHundredThousandRows},
		{"FairnessFloodingTenantLeavesAnotherItsWrites", TestFairnessFloodingTenantLeavesAnotherItsWrites},
	} {
		runInCluster(t, tc.name, tc.test, !serial[tc.name])
	}
}

// runInCluster runs test as t's subtest name in cluster mode, in parallel
// with t's other parallel subtests when parallel is set (a case that
// mostly waits for its cluster: see TestBehaviourInACluster).
func runInCluster(t *testing.T, name string, test func(*testing.T), parallel bool) {
	t.Run(name, func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		clusterTests.Store(t, struct{}{})
		defer clusterTests.Delete(t)
		test(t)
	})
}
