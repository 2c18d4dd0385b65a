/// The watch of the prefix, and what the member shows of itself.
extension FleetMember {
    /// Every change under the prefix, from the revision last seen: other hosts' records,
    /// claims that vanish with their host's lease (a takeover's cue), and member names
    /// taken and freed.
    func startWatch() {
        guard !watching, !stopped else { return }
        watching = true
        store.endWatch()
        store.watch(prefix: settings.prefix + "/", fromRevision: watchRevision == 0 ? 0 : watchRevision + 1, timeout: Self.watchLife, onEvents: { [weak self] events, revision in
            guard let self else { return }
            if revision > self.watchRevision { self.watchRevision = revision }
            self.watched(events)
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

    /// One batch of the watch (every event of a revision comes in one): member keys first,
    /// so that a claim that vanished with its host's lease is told apart from one released,
    /// and a lease revoked at a clean stop from one that expired.
    func watched(_ events: [EtcdWatchEvent]) {
        let parsed = events.map { (event: $0, key: keys.parse($0.kv.key)) }
        var ended: [Int64: FleetRelease] = [:]
        for (event, key) in parsed {
            guard case .member(let name)? = key, event.kind == .delete, let previous = event.previous, previous.lease != 0 else { continue }
            ended[previous.lease] = FleetMemberRecord(json: previous.value)?.stopping == true ? .stopped : .leaseExpired
            if name == settings.name { memberNameFreed(holderLease: previous.lease) }
        }
        for (event, key) in parsed {
            switch key {
            case .file(let rule, let relativeKey)?:
                // A running claim of another host's that vanished: its lease ended, or its
                // job failed and released it.
                guard event.kind == .delete, let previous = event.previous, previous.lease != 0,
                      let file = FleetFile(json: previous.value), file.state == .running, file.host != settings.name,
                      let relative = FleetKeys.pathBytes(relativeKey), let files = fileListener else { continue }
                files.fleetFileQueue.async { files.fleetFileReleased(rule: rule, relative: relative) }
            case .fire(let task, let instant)?:
                switch event.kind {
                case .put:
                    // A claim (bound to a lease) is news to nobody: every host learns who won
                    // a fire from its own claim. Records and releases are read.
                    guard event.kv.lease == 0, let fire = FleetFire(task: task, instant: instant, json: event.kv.value) else { continue }
                    let revision = event.kv.modRevision
                    tell { $0.fleetFireChanged(fire, revision: revision) }
                case .delete:
                    // Only a claim (bound to a lease) vanishing means a host lost its run; pruned
                    // records were bound to nothing.
                    guard let previous = event.previous, previous.lease != 0,
                          let fire = FleetFire(task: task, instant: instant, json: previous.value), fire.state == .running else { continue }
                    let why = ended[previous.lease] ?? .leaseExpired
                    tell { $0.fleetFireReleased(fire, why: why) }
                }
            case .member?, .running?, nil:
                continue
            }
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
        let duty = dutyDescription
        fields.append(DumpField("member_state", .string(duty.state)))
        fields.append(DumpField("name_held_by", duty.holder.map { .string($0) } ?? .null))
        fields.append(DumpField("starts_allowed_for_s", gate.current.map { .double(Double(max(.zero, $0.until - now).nanosecondsClamped) / 1e9) } ?? .null))
        fields.append(DumpField("records_waiting", .int(Int64(writes.count))))
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
