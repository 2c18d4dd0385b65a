import XCTest

// The watch method matrix (docs/testing.md, issue 37): each test about how a change is heard
// runs under inotify (the plain test, in its class's file, with the rules' own method), and
// once more under fanotify and under poll here, each as a test of its own. Tests about what
// follows admission (batching, retries, the ledger's files, a second daemon) run once, under
// inotify. A method is left out where the test is about what only the others give: poll hears
// no deletions, moves or kernel queues (`skipIfPolling` says which), and fanotify's tmpfs never
// reuses an inode. A fanotify test gets a tmpfs of its own (WatchTestCase.makeSandbox; root).

extension DeliveryPatternTests {
    func testTempNameRenamedIntoPlace_isReadUnderItsFinalName_everyTime_underFanotify() throws {
        try under("fanotify", testTempNameRenamedIntoPlace_isReadUnderItsFinalName_everyTime)
    }
    func testTempNameRenamedIntoPlace_isReadUnderItsFinalName_everyTime_underPoll() throws {
        try under("poll", testTempNameRenamedIntoPlace_isReadUnderItsFinalName_everyTime)
    }
    func testSameNameExtractedWithTheSameSizeAndModificationTime_isReadEveryTime_underFanotify() throws {
        try under("fanotify", testSameNameExtractedWithTheSameSizeAndModificationTime_isReadEveryTime)
    }
    func testSameNameExtractedWithTheSameSizeAndModificationTime_isReadEveryTime_underPoll() throws {
        try under("poll", testSameNameExtractedWithTheSameSizeAndModificationTime_isReadEveryTime)
    }
    func testJobThatDeletesItsFile_andTheNextFileReusesTheInode_withAPreservedMtime_isRead_underPoll() throws {
        try under("poll", testJobThatDeletesItsFile_andTheNextFileReusesTheInode_withAPreservedMtime_isRead)
    }
    func testCatchUp_ofAFileThatReusesAHandledFilesInodeAndMtime_runsIt_underFanotify() throws {
        try under("fanotify", testCatchUp_ofAFileThatReusesAHandledFilesInodeAndMtime_runsIt)
    }
    func testCatchUp_ofAFileThatReusesAHandledFilesInodeAndMtime_runsIt_underPoll() throws {
        try under("poll", testCatchUp_ofAFileThatReusesAHandledFilesInodeAndMtime_runsIt)
    }
    func testFileMovedWithinTheTreeAfterItsJob_isNotRunAgain_underFanotify() throws {
        try under("fanotify", testFileMovedWithinTheTreeAfterItsJob_isNotRunAgain)
    }
    func testFileMovedWithinTheTreeAfterItsJob_isNotRunAgain_underPoll() throws {
        try under("poll", testFileMovedWithinTheTreeAfterItsJob_isNotRunAgain)
    }
    func testHardLinksIntoTheTree_areHandledAsArrivals_underFanotify() throws {
        try under("fanotify", testHardLinksIntoTheTree_areHandledAsArrivals)
    }
    func testHardLinksIntoTheTree_areHandledAsArrivals_underPoll() throws {
        try under("poll", testHardLinksIntoTheTree_areHandledAsArrivals)
    }
    func testFileFoundByTheScanOfANewDirectory_whileItsWriterGoesOn_isReadWhole_underFanotify() throws {
        try under("fanotify", testFileFoundByTheScanOfANewDirectory_whileItsWriterGoesOn_isReadWhole)
    }
    func testFileFoundByTheScanOfANewDirectory_whileItsWriterGoesOn_isReadWhole_underPoll() throws {
        try under("poll", testFileFoundByTheScanOfANewDirectory_whileItsWriterGoesOn_isReadWhole)
    }
    func testReloadThatTurnsBatchingOn_handsWaitingFilesToBatches_neverAJobWithoutItsFile_underFanotify() throws {
        try under("fanotify", testReloadThatTurnsBatchingOn_handsWaitingFilesToBatches_neverAJobWithoutItsFile)
    }
    func testReloadThatTurnsBatchingOn_handsWaitingFilesToBatches_neverAJobWithoutItsFile_underPoll() throws {
        try under("poll", testReloadThatTurnsBatchingOn_handsWaitingFilesToBatches_neverAJobWithoutItsFile)
    }
}

extension HostileNameTests {
    func testEveryHostileName_reachesArgvEnvironmentAndStdinByteExact_andRunsNothing_underFanotify() throws {
        try under("fanotify", testEveryHostileName_reachesArgvEnvironmentAndStdinByteExact_andRunsNothing)
    }
    func testEveryHostileName_reachesArgvEnvironmentAndStdinByteExact_andRunsNothing_underPoll() throws {
        try under("poll", testEveryHostileName_reachesArgvEnvironmentAndStdinByteExact_andRunsNothing)
    }
}

extension WatchRunTests {
    func testFileWrittenAndClosed_startsOneJobWithItsPath_underFanotify() throws {
        try under("fanotify", testFileWrittenAndClosed_startsOneJobWithItsPath)
    }
    func testFileWrittenAndClosed_startsOneJobWithItsPath_underPoll() throws {
        try under("poll", testFileWrittenAndClosed_startsOneJobWithItsPath)
    }
    func testFilesTheLedgerHolds_areForgottenInMemory_andStillNotRunAgainWhenMovedWithinTheTree_underFanotify() throws {
        try under("fanotify", testFilesTheLedgerHolds_areForgottenInMemory_andStillNotRunAgainWhenMovedWithinTheTree)
    }
    func testFilesTheLedgerHolds_areForgottenInMemory_andStillNotRunAgainWhenMovedWithinTheTree_underPoll() throws {
        try under("poll", testFilesTheLedgerHolds_areForgottenInMemory_andStillNotRunAgainWhenMovedWithinTheTree)
    }
    func testRecursive_aDeepTreeCreatedInOneGo_yieldsTheFileInside_underFanotify() throws {
        try under("fanotify", testRecursive_aDeepTreeCreatedInOneGo_yieldsTheFileInside)
    }
    func testRecursive_aDeepTreeCreatedInOneGo_yieldsTheFileInside_underPoll() throws {
        try under("poll", testRecursive_aDeepTreeCreatedInOneGo_yieldsTheFileInside)
    }
    func testSettle_coalescesRepeatedWritesOfOneFileIntoOneJob_underFanotify() throws {
        try under("fanotify", testSettle_coalescesRepeatedWritesOfOneFileIntoOneJob)
    }
    func testHostileFileNames_reachTheJobByteExact_underFanotify() throws {
        try under("fanotify", testHostileFileNames_reachTheJobByteExact)
    }
    func testHostileFileNames_reachTheJobByteExact_underPoll() throws {
        try under("poll", testHostileFileNames_reachTheJobByteExact)
    }
    func testQueueOverflow_isRecoveredByARescan_andNoFileIsLost_underFanotify() throws {
        try under("fanotify", testQueueOverflow_isRecoveredByARescan_andNoFileIsLost)
    }
    func testQueueOverflow_inARuleWithoutCatchUp_runsTheFilesWhoseEventsWereLost_notThoseThereBefore_underFanotify() throws {
        try under("fanotify", testQueueOverflow_inARuleWithoutCatchUp_runsTheFilesWhoseEventsWereLost_notThoseThereBefore)
    }
    func testRootDeletedAndRecreated_isWatchedAgain_andFilesInsideAreHandled_underFanotify() throws {
        try under("fanotify", testRootDeletedAndRecreated_isWatchedAgain_andFilesInsideAreHandled)
    }
    func testMovedInAndDeleted_areTheEventsTheRuleAsksFor_underFanotify() throws {
        try under("fanotify", testMovedInAndDeleted_areTheEventsTheRuleAsksFor)
    }
    func testReload_addsAndRemovesRules_withoutDisturbingUnchangedOnes_underFanotify() throws {
        try under("fanotify", testReload_addsAndRemovesRules_withoutDisturbingUnchangedOnes)
    }
    func testReload_addsAndRemovesRules_withoutDisturbingUnchangedOnes_underPoll() throws {
        try under("poll", testReload_addsAndRemovesRules_withoutDisturbingUnchangedOnes)
    }
}

extension WatchEdgeCaseTests {
    func testRootRenamedAway_isNoticedAtOnce_theMovedTreeIsNoLongerAttributed_andTheNewRootIsCaughtUp_underFanotify() throws {
        try under("fanotify", testRootRenamedAway_isNoticedAtOnce_theMovedTreeIsNoLongerAttributed_andTheNewRootIsCaughtUp)
    }
    func testRootIsASymlink_isResolvedAndWatched_andSaidSo_underFanotify() throws {
        try under("fanotify", testRootIsASymlink_isResolvedAndWatched_andSaidSo)
    }
    func testRootIsASymlink_isResolvedAndWatched_andSaidSo_underPoll() throws {
        try under("poll", testRootIsASymlink_isResolvedAndWatched_andSaidSo)
    }
    func testScans_handJobsRegularFilesOnly_andCountWhatTheySkip_underFanotify() throws {
        try under("fanotify", testScans_handJobsRegularFilesOnly_andCountWhatTheySkip)
    }
    func testScans_handJobsRegularFilesOnly_andCountWhatTheySkip_underPoll() throws {
        try under("poll", testScans_handJobsRegularFilesOnly_andCountWhatTheySkip)
    }
    func testDirectoryMovedInsideTheTree_doesNotRunItsFilesAgain_underFanotify() throws {
        try under("fanotify", testDirectoryMovedInsideTheTree_doesNotRunItsFilesAgain)
    }
    func testDirectoryMovedInsideTheTree_doesNotRunItsFilesAgain_underPoll() throws {
        try under("poll", testDirectoryMovedInsideTheTree_doesNotRunItsFilesAgain)
    }
    func testDirectoriesThatCannotBeWatched_areReportedOncePerCause_withACount_underFanotify() throws {
        try under("fanotify", testDirectoriesThatCannotBeWatched_areReportedOncePerCause_withACount)
    }
    func testAFileSystemMountedOverTheRoot_isNoticed_andItsFilesAreHandled_underFanotify() throws {
        try under("fanotify", testAFileSystemMountedOverTheRoot_isNoticed_andItsFilesAreHandled)
    }
    func testAFileSystemMountedOverTheRoot_isNoticed_andItsFilesAreHandled_underPoll() throws {
        try under("poll", testAFileSystemMountedOverTheRoot_isNoticed_andItsFilesAreHandled)
    }
}

extension RootTrackingTests {
    func testTheRootsParentRenamed_isNoticed_theOldTreeRunsNothing_andTheNewRootIsWatched_underFanotify() throws {
        try under("fanotify", testTheRootsParentRenamed_isNoticed_theOldTreeRunsNothing_andTheNewRootIsWatched)
    }
    func testTheRootsParentRenamed_isNoticed_theOldTreeRunsNothing_andTheNewRootIsWatched_underPoll() throws {
        try under("poll", testTheRootsParentRenamed_isNoticed_theOldTreeRunsNothing_andTheNewRootIsWatched)
    }
    func testASymbolicLinkRootRetargeted_likeADeploy_isFollowedToTheNewTarget_underFanotify() throws {
        try under("fanotify", testASymbolicLinkRootRetargeted_likeADeploy_isFollowedToTheNewTarget)
    }
    func testASymbolicLinkRootRetargeted_likeADeploy_isFollowedToTheNewTarget_underPoll() throws {
        try under("poll", testASymbolicLinkRootRetargeted_likeADeploy_isFollowedToTheNewTarget)
    }
    func testWorkWaitingWhenTheRootIsRenamedAway_neverRunsOnTheReplacementsWithTheSameNames_underFanotify() throws {
        try under("fanotify", testWorkWaitingWhenTheRootIsRenamedAway_neverRunsOnTheReplacementsWithTheSameNames)
    }
    func testWorkWaitingWhenTheRootIsRenamedAway_neverRunsOnTheReplacementsWithTheSameNames_underPoll() throws {
        try under("poll", testWorkWaitingWhenTheRootIsRenamedAway_neverRunsOnTheReplacementsWithTheSameNames)
    }
}
