import Dispatch
import WatchkeeperCore

// Before anything else, and before any thread exists: every thread inherits this
// mask, so the handled signals stay pending until their signalfd-backed sources
// are registered (see HandledSignals).
HandledSignals.blockInCallingThread()
ProcessStart.mark()
WatchkeeperCommand.main()
