import Dispatch
import WatchkeeperCore

// Before anything else, and before any thread exists: every thread inherits this
// mask, so the handled signals stay pending until their signalfd-backed sources
// are registered (see HandledSignals).
HandledSignals.blockInCallingThread()
ProcessStart.mark()
MallocArenas.restrict()
// Nice is per thread on Linux: jobs start at the main thread's value, read before any
// worker thread exists.
ProcessSpawner.captureBaseNiceness()
WatchkeeperCommand.main()
