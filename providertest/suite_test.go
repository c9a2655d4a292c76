package providertest

import (
	"slices"
	"testing"
)

// duroxideTests is duroxide 0.1.29's provider validation suite: its 19
// modules, in its order, and each module's tests under their Go-cased names.
// A module or test that is lost, renamed or duplicated in Modules() shows
// here by name.
func duroxideTests() []moduleNames {
	return []moduleNames{
		{"atomicity", []string{
			"TestAtomicityFailureRollback",
			"TestMultiOperationAtomicAck",
			"TestLockReleasedOnlyOnSuccessfulAck",
			"TestConcurrentAckPrevention",
		}},
		{"error_handling", []string{
			"TestInvalidLockTokenOnAck",
			"TestDuplicateEventIDRejection",
			"TestMissingInstanceMetadata",
			"TestCorruptedSerializationData",
			"TestLockExpirationDuringAck",
			"TestReadCorruptedHistoryReturnsError",
			"TestReadWithExecutionCorruptedHistoryReturnsError",
		}},
		{"instance_creation", []string{
			"TestInstanceCreationViaMetadata",
			"TestNoInstanceCreationOnEnqueue",
			"TestNullVersionHandling",
			"TestSubOrchestrationInstanceCreation",
		}},
		{"instance_locking", []string{
			"TestExclusiveInstanceLock",
			"TestLockTokenUniqueness",
			"TestInvalidLockTokenRejection",
			"TestConcurrentInstanceFetching",
			"TestCompletionsArrivingDuringLockBlocked",
			"TestCrossInstanceLockIsolation",
			"TestMessageTaggingDuringLock",
			"TestAckOnlyAffectsLockedMessages",
			"TestMultiThreadedLockContention",
			"TestMultiThreadedNoDuplicateProcessing",
			"TestMultiThreadedLockExpirationRecovery",
		}},
		{"lock_expiration", []string{
			"TestLockExpiresAfterTimeout",
			"TestAbandonReleasesLockImmediately",
			"TestLockRenewalOnAck",
			"TestConcurrentLockAttemptsRespectExpiration",
			"TestWorkerLockRenewalSuccess",
			"TestWorkerLockRenewalInvalidToken",
			"TestWorkerLockRenewalAfterExpiration",
			"TestWorkerLockRenewalExtendsTimeout",
			"TestWorkerLockRenewalAfterAck",
			"TestAbandonWorkItemReleasesLock",
			"TestAbandonWorkItemWithDelay",
			"TestWorkerAckFailsAfterLockExpiry",
			"TestOrchestrationLockRenewalAfterExpiration",
		}},
		{"multi_execution", []string{
			"TestExecutionIsolation",
			"TestLatestExecutionDetection",
			"TestExecutionIDSequencing",
			"TestContinueAsNewCreatesNewExecution",
			"TestExecutionHistoryPersistence",
		}},
		{"queue_semantics", []string{
			"TestWorkerQueueFIFOOrdering",
			"TestWorkerPeekLockSemantics",
			"TestWorkerAckAtomicity",
			"TestTimerDelayedVisibility",
			"TestLostLockTokenHandling",
			"TestWorkerItemImmediateVisibility",
			"TestWorkerDelayedVisibilitySkipsFutureItems",
			"TestOrphanQueueMessagesDropped",
		}},
		{"poison_message", []string{
			"TestOrchestrationAttemptCountStartsAtOne",
			"TestOrchestrationAttemptCountIncrementsOnRefetch",
			"TestWorkerAttemptCountStartsAtOne",
			"TestWorkerAttemptCountIncrementsOnLockExpiry",
			"TestAttemptCountIsPerMessage",
			"TestAbandonWorkItemIgnoreAttemptDecrements",
			"TestAbandonOrchestrationItemIgnoreAttemptDecrements",
			"TestIgnoreAttemptNeverGoesNegative",
			"TestMaxAttemptCountAcrossMessageBatch",
			"TestOrchestrationDelayedAbandonPreservesUnlockedRows",
			"TestOrchestrationIgnoreAttemptPreservesHiddenStart",
		}},
		{"long_polling", []string{
			"TestShortPollReturnsImmediately",
			"TestLongPollWaitsForTimeout",
			"TestFetchRespectsTimeoutUpperBound",
			"TestShortPollWorkItemReturnsImmediately",
			"TestLongPollWorkItemWaitsForTimeout",
		}},
		{"cancellation", []string{
			"TestFetchReturnsRunningStateForActiveOrchestration",
			"TestFetchReturnsTerminalStateWhenOrchestrationCompleted",
			"TestFetchReturnsTerminalStateWhenOrchestrationFailed",
			"TestFetchReturnsTerminalStateWhenOrchestrationContinuedAsNew",
			"TestFetchReturnsMissingStateWhenInstanceDeleted",
			"TestRenewReturnsRunningWhenOrchestrationActive",
			"TestRenewReturnsTerminalWhenOrchestrationCompleted",
			"TestRenewReturnsMissingWhenInstanceDeleted",
			"TestAckWorkItemNoneDeletesWithoutEnqueue",
			"TestCancelledActivitiesDeletedFromWorkerQueue",
			"TestAckWorkItemFailsWhenEntryDeleted",
			"TestRenewFailsWhenEntryDeleted",
			"TestCancellingNonexistentActivitiesIsIdempotent",
			"TestBatchCancellationDeletesMultipleActivities",
			"TestSameActivityInWorkerItemsAndCancelledIsNoop",
			"TestOrphanActivityAfterInstanceForceDeletion",
		}},
		{"capability_filtering", []string{
			"TestFetchWithFilterNoneReturnsAnyItem",
			"TestFetchWithCompatibleFilterReturnsItem",
			"TestFetchWithIncompatibleFilterSkipsItem",
			"TestFetchFilterSkipsIncompatibleSelectsCompatible",
			"TestFetchFilterDoesNotLockSkippedInstances",
			"TestFetchFilterNullPinnedVersionAlwaysCompatible",
			"TestFetchFilterBoundaryVersions",
			"TestPinnedVersionStoredViaAckMetadata",
			"TestPinnedVersionImmutableAcrossAckCycles",
			"TestContinueAsNewExecutionGetsOwnPinnedVersion",
			"TestFilterWithEmptySupportedVersionsReturnsNothing",
			"TestConcurrentFilteredFetchNoDoubleLock",
			"TestAckStoresPinnedVersionViaMetadataUpdate",
			"TestProviderUpdatesPinnedVersionWhenTold",
			"TestFetchCorruptedHistoryFilteredVsUnfiltered",
			"TestFetchDeserializationErrorIncrementsAttemptCount",
			"TestFetchDeserializationErrorEventuallyReachesPoison",
			"TestFetchFilterAppliedBeforeHistoryDeserialization",
			"TestFetchSingleRangeOnlyUsesFirstRange",
			"TestAckAppendsEventToCorruptedHistory",
		}},
		{"custom_status", []string{
			"TestCustomStatusSet",
			"TestCustomStatusClear",
			"TestCustomStatusNonePreserves",
			"TestCustomStatusVersionIncrements",
			"TestCustomStatusPollingNoChange",
			"TestCustomStatusNonexistentInstance",
			"TestCustomStatusDefaultOnNewInstance",
		}},
		{"sessions", []string{
			"TestNonSessionItemsFetchableByAnyWorker",
			"TestSessionItemClaimableWhenNoSession",
			"TestSessionAffinitySameWorker",
			"TestSessionAffinityBlocksOtherWorker",
			"TestDifferentSessionsDifferentWorkers",
			"TestMixedSessionAndNonSessionItems",
			"TestSessionClaimableAfterLockExpiry",
			"TestNoneSessionSkipsSessionItems",
			"TestSomeSessionReturnsAllItems",
			"TestRenewSessionLockActive",
			"TestRenewSessionLockSkipsIdle",
			"TestRenewSessionLockNoSessions",
			"TestCleanupRemovesExpiredNoItems",
			"TestCleanupKeepsSessionsWithPendingItems",
			"TestCleanupKeepsActiveSessions",
			"TestAckUpdatesSessionLastActivity",
			"TestRenewWorkItemUpdatesSessionLastActivity",
			"TestSessionItemsProcessedInOrder",
			"TestNonSessionItemsReturnedWithSessionConfig",
			"TestSharedWorkerIDAnyCallerCanFetchOwnedSession",
			"TestConcurrentSessionClaimOnlyOneWins",
			"TestSessionTakeoverAfterLockExpiry",
			"TestCleanupThenNewItemRecreatesSession",
			"TestAbandonedSessionItemRetryable",
			"TestAbandonedSessionItemIgnoreAttempt",
			"TestRenewSessionLockAfterExpiryReturnsZero",
			"TestOriginalWorkerReclaimsExpiredSession",
			"TestActivityLockExpiresSessionLockValidSameWorkerRefetches",
			"TestSessionLockExpiresNewOwnerGetsRedelivery",
			"TestSessionLockExpiresSameWorkerReacquires",
			"TestBothLocksExpireDifferentWorkerClaims",
			"TestSessionLockExpiresActivityLockValidAckSucceeds",
			"TestSessionLockRenewalExtendsPastOriginalTimeout",
		}},
		{"tag_filtering", []string{
			"TestDefaultOnlyFetchesUntagged",
			"TestTagsFetchesOnlyMatching",
			"TestDefaultAndFetchesUntaggedAndMatching",
			"TestNoneFilterReturnsNothing",
			"TestMultiTagFilter",
			"TestTagRoundTripPreservation",
			"TestAnyFilterFetchesEverything",
			"TestTagSurvivesAbandonAndRefetch",
			"TestMultiRuntimeTagIsolation",
			"TestTagPreservedThroughAckOrchestrationItem",
		}},
		{"kv_store", []string{
			"TestKVSetAndGet",
			"TestKVOverwrite",
			"TestKVClearSingle",
			"TestKVClearAll",
			"TestKVGetNonexistent",
			"TestKVSnapshotInFetch",
			"TestKVSnapshotAfterClearSingle",
			"TestKVSnapshotAfterClearAll",
			"TestKVExecutionIDTracking",
			"TestKVCrossExecutionOverwrite",
			"TestKVCrossExecutionRemoveReadd",
			"TestKVPrunePreservesOverwritten",
			"TestKVPrunePreservesAllKeys",
			"TestKVInstanceIsolation",
			"TestKVDeleteInstanceCascades",
			"TestKVClearNonexistentKey",
			"TestKVGetUnknownInstance",
			"TestKVSetAfterClear",
			"TestKVEmptyValue",
			"TestKVLargeValue",
			"TestKVSpecialCharsInKey",
			"TestKVSnapshotEmpty",
			"TestKVSnapshotCrossExecution",
			"TestKVPruneCurrentExecutionProtected",
			"TestKVDeleteInstanceWithChildren",
			"TestKVClearIsolation",
			"TestKVDeltaSnapshotExcludesCurrentExecution",
			"TestKVDeltaSnapshotIncludesCompletedExecution",
			"TestKVDeltaClientReadsMerged",
			"TestKVDeltaTombstoneOverridesStore",
			"TestKVDeltaClearAllTombstonesStore",
			"TestKVDeltaMergedOnCompletion",
			"TestKVDeltaMergedOnCAN",
			"TestKVDeltaDeleteInstanceCascades",
			"TestKVDeltaPruneUntouchedKeySurvives",
		}},
		{"management", []string{
			"TestListInstances",
			"TestListInstancesByStatus",
			"TestListExecutions",
			"TestGetInstanceInfo",
			"TestGetExecutionInfo",
			"TestGetSystemMetrics",
			"TestGetQueueDepths",
			"TestGetInstanceStatsNonexistent",
			"TestGetInstanceStatsHistory",
			"TestGetInstanceStatsKV",
			"TestGetInstanceStatsCarryForward",
			"TestGetInstanceStatsKVDeltaOnly",
			"TestGetInstanceStatsKVMerged",
		}},
		{"deletion", []string{
			"TestDeleteTerminalInstances",
			"TestDeleteRunningRejectedForceSucceeds",
			"TestDeleteNonexistentInstance",
			"TestDeleteCleansQueuesAndLocks",
			"TestCascadeDeleteHierarchy",
			"TestForceDeletePreventsAckRecreation",
			"TestListChildren",
			"TestDeleteGetParentID",
			"TestDeleteGetInstanceTree",
			"TestDeleteInstancesAtomic",
			"TestDeleteInstancesAtomicForce",
			"TestDeleteInstancesAtomicOrphanDetection",
			"TestStaleActivityAfterDeleteRecreate",
		}},
		{"prune", []string{
			"TestPruneOptionsCombinations",
			"TestPruneSafety",
			"TestPruneBulk",
			"TestPruneBulkIncludesRunningInstances",
		}},
		{"bulk_deletion", []string{
			"TestDeleteInstanceBulkFilterCombinations",
			"TestDeleteInstanceBulkSafetyAndLimits",
			"TestDeleteInstanceBulkCompletedBeforeFilter",
			"TestDeleteInstanceBulkCascadesToChildren",
		}},
		{"race_replay", []string{
			"TestDuplicateStartPreservesPinnedHandler",
			"TestContinueAsNewUnregisteredBackoff",
			"TestContinueAsNewDuplicateStart",
			"TestContinueAsNewTransitionDelivery",
			"TestQueueRaceCancellationReplay",
			"TestContinueAsNewQueueRaceReplay",
			"TestQueueReplayVersionStampRoundtrip",
			"TestPositionalWaitRaceReplay",
			"TestLegacyQueueRaceDecisionPreserved",
		}},
	}
}

// moduleNames is one module's name and its tests' names.
type moduleNames struct {
	module string
	tests  []string
}

// TestSuiteHoldsEveryDuroxideTest pins the suite to duroxide's modules and
// tests by name, in order, so dropping a whole module (or swapping a test
// for another with the same count) fails.
func TestSuiteHoldsEveryDuroxideTest(t *testing.T) {
	modules := Modules()
	var got []string
	for _, m := range modules {
		got = append(got, m.Name)
	}
	pinned := duroxideTests()
	var want []string
	for _, m := range pinned {
		want = append(want, m.module)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("modules:\n got %q\nwant %q", got, want)
	}
	for i, m := range modules {
		var names []string
		for _, tc := range m.Tests {
			names = append(names, tc.Name)
		}
		if !slices.Equal(names, pinned[i].tests) {
			t.Errorf("module %s tests:\n got %q\nwant %q", m.Name, names, pinned[i].tests)
		}
	}
}
