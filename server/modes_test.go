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
func TestBehaviourInACluster(t *testing.T) {
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			clusterTests.Store(t, struct{}{})
			defer clusterTests.Delete(t)
			tc.test(t)
		})
	}
}
