import Logging

extension LifecycleOwner {
    /// Once at start: how jobs are contained. At start and at every reload: each task or
    /// watch whose limits cannot be enforced here, by name, so no one trusts a limit
    /// that is not there.
    func reportContainment(_ configuration: Configuration, atStart: Bool) {
        if atStart {
            let text = "jobs are contained by \(containment.description)"
            if case .cgroups = containment { logger.info("\(text)") } else { logger.notice("\(text)") }
            if jobNetwork.reachable {
                logger.info("jobs' network: \(jobNetwork.description)")
            } else {
                logger.notice("jobs' network: \(jobNetwork.description); jobs that need it: see \"Network\" in docs/operations.md (systemctl edit watchkeeper)")
            }
        }
        let jobs = configuration.tasks.map { ("task", $0.name, $0.job.limits) } + configuration.watches.map { ("watch", $0.name, $0.job.limits) }
        for (kind, name, limits) in jobs {
            let unenforced = containment.unenforceable(limits)
            guard !unenforced.isEmpty else { continue }
            logger.warning("\(kind) \(name): not enforced here: \(unenforced.joined(separator: "; "))",
                           metadata: [kind: .string(name)])
        }
    }
}
