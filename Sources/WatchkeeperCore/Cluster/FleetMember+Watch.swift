/// The watch of the prefix, and what the member shows of itself.
extension FleetMember {
    /// Every change under <prefix>/tasks/, from the revision last seen: other hosts'
    /// records, and claims that vanish with their host's lease (a takeover's cue).
    func startWatch() {
        guard !watching, !stopped else { return }
        watching = true
        store.endWatch()
        store.watch(prefix: settings.prefix + "/", fromRevision: watchRevision == 0 ? 0 : watchRevision + 1, timeout: Self.watchLife, onEvents: { [weak self] events, revision in
            guard let self else { return }
            if revision > self.watchRevision { self.watchRevision = revision }
            for event in events { self.watched(event) }
        }, onCompacted: { [weak self] compacted in
            // Events were compacted away: go on from now (the scheduler's own check of
            // fires running elsewhere covers the gap).
            self?.watchRevision = 0
            self?.logger.info("the fleet watch started before etcd's compaction at revision \(compacted): watching from now")
        }, completion: { [weak self] result in
            guard let self else { return }
            self.watching = false
            if case .failure(let error) = result, !self.stopped { self.lastCause = error.description }
            guard !self.stopped else { return }
            // Renewed at once while the lease is held; otherwise when it is back.
            if self.lease.leaseID != nil {
                if case .failure = result {
                    if self.watchRetry == nil {
                        self.watchRetry = self.clock.makeTimer(target: "fleet watch retry") { [weak self] in self?.startWatch() }
                    }
                    self.watchRetry?.schedule(at: self.clock.now + .seconds(1))
                } else {
                    self.startWatch()
                }
            }
        })
    }

    func watched(_ event: EtcdWatchEvent) {
        if case .file(let rule, let relativeKey)? = keys.parse(event.kv.key) {
            // A running claim of another host's that vanished: its lease expired, or its
            // job failed and released it.
            guard event.kind == .delete, let previous = event.previous, previous.lease != 0,
                  let file = FleetFile(json: previous.value), file.state == .running, file.host != settings.name,
                  let relative = FleetKeys.pathBytes(relativeKey), let files = fileListener else { return }
            files.fleetFileQueue.async { files.fleetFileReleased(rule: rule, relative: relative) }
            return
        }
        guard case .fire(let task, let instant)? = keys.parse(event.kv.key) else { return }
        switch event.kind {
        case .put:
            guard let fire = FleetFire(task: task, instant: instant, json: event.kv.value) else { return }
            tell { $0.fleetFireChanged(fire) }
        case .delete:
            // Only a claim (bound to a lease) vanishing means a host lost its run; pruned
            // records were bound to nothing.
            guard let previous = event.previous, previous.lease != 0,
                  let fire = FleetFire(task: task, instant: instant, json: previous.value), fire.state == .running else { return }
            tell { $0.fleetFireReleased(fire) }
        }
    }

    // MARK: The dump

    /// The member's part of the dump's `cluster` section (the owner adds the client's).
    public func describedFields() -> [DumpField] {
        var fields = settings.describedFields
        fields.append(DumpField("endpoint_in_use", .string(store.endpointDescription)))
        let state: String
        switch lease.state {
        case .none: state = "none"
        case .granting: state = "granting"
        case .held: state = "held"
        case .fencing: state = "fencing"
        }
        let now = clock.now
        fields.append(DumpField("lease_state", .string(state)))
        fields.append(DumpField("lease_id", lease.leaseID.map { .string(Self.hex($0)) } ?? .null))
        fields.append(DumpField("lease_expires_in_s", lease.expiresBy.map { .double(Double(max(.zero, $0 - now).nanosecondsClamped) / 1e9) } ?? .null))
        fields.append(DumpField("last_renewal_age_s", lease.lastRenewal.map { .double(Double((now - $0).nanosecondsClamped) / 1e9) } ?? .null))
        fields.append(DumpField("renewals_failed", .int(Int64(lease.renewalsFailed))))
        fields.append(DumpField("fences", .int(Int64(lease.fences))))
        fields.append(DumpField("unavailable_since", unavailable.map { .string($0.wall.iso8601) } ?? .null))
        fields.append(DumpField("last_error", lastCause.map { .string($0) } ?? .null))
        fields.append(DumpField("watching", .bool(watching)))
        fields.append(DumpField("watch_revision", .int(watchRevision)))
        fields.append(DumpField("claim_latency_p50_ms", claimLatency.percentile(0.5).map { .double(Double($0.nanosecondsClamped) / 1e6) } ?? .null))
        fields.append(DumpField("counters", .object(counters.sorted { $0.key < $1.key }.map { DumpField($0.key, .int(Int64($0.value))) })))
        return fields
    }
}
