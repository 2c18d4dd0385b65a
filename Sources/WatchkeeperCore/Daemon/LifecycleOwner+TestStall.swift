import Dispatch

#if canImport(Glibc)
import Glibc
#endif

extension LifecycleOwner {
    /// Fault injection for the watchdog's tests (docs/testing.md):
    /// WATCHKEEPER_TEST_STALL=<queue>:<duration>[:<delay>] blocks that subsystem's
    /// queue once, after READY, as a stuck handler would.
    func scheduleTestStallIfAsked() {
        guard let request = options.environment["WATCHKEEPER_TEST_STALL"], !request.isEmpty else { return }
        let parts = request.split(separator: ":").map(String.init)
        let candidates = queues.all
        guard parts.count >= 2, let target = candidates.first(where: { $0.name == parts[0] }),
              case .success(let stall) = DurationParser.parse(parts[1]) else {
            logger.warning("ignoring WATCHKEEPER_TEST_STALL=\(request): expected <queue>:<duration>[:<delay>] with queue one of \(candidates.map(\.name).joined(separator: ", "))")
            return
        }
        var delay: Duration = .zero
        if parts.count > 2, case .success(let parsed) = DurationParser.parse(parts[2]) { delay = parsed }
        logger.warning("test hook: queue \(target.label) will be blocked for \(stall.compactDescription) in \(delay.compactDescription)")
        var hook: RegisteredTimer?
        hook = sources.makeTimer(owner: "lifecycle", target: "test hook: block \(target.label) for \(stall.compactDescription)", on: queues.lifecycle) {
            hook?.cancel()
            hook = nil
            target.async {
                var remaining = timespec(tv_sec: Int(stall.components.seconds), tv_nsec: Int(stall.components.attoseconds / 1_000_000_000))
                var left = timespec()
                // Not retried as is: an interrupted sleep goes on for what was left of it.
                while case .failure(.interrupted) = nothingOrErrno(retryOnInterrupt: false, { nanosleep(&remaining, &left) }) {
                    remaining = left
                }
            }
        }
        hook?.schedule(after: delay)
    }
}
