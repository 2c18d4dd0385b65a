/// One live member per name (docs/fleet.md, "One member per name"): at every new lease the
/// host creates `<prefix>/members/<name>` on it, if absent. If another live member holds
/// the name (a cloned host, a second daemon given the same `name`), this host takes no fleet
/// duty, says who holds it, and tries again when that member's lease ends.
extension FleetMember {
    static let registrationRetry = Duration.milliseconds(500)

    var memberRecord: FleetMemberRecord {
        FleetMemberRecord(host: identity.hostName, machineID: identity.machineID, bootID: identity.bootID, pid: identity.pid,
                          since: clock.wallNow.iso8601)
    }

    func register(_ id: Int64) {
        guard !stopped, lease.leaseID == id else { return }
        if case .nameTaken = duty {} else { duty = .registering(lease: id) }
        let key = keys.member(settings.name)
        store.createAll([(key, memberRecord.json)], lease: id, timeout: callTimeout) { [self] result in
            guard !stopped, lease.leaseID == id else { return }
            switch result {
            case .success(.created):
                registered(id)
            case .success(.exists(let found)):
                guard let holder = found.first else { return retryRegistration(id, after: Self.registrationRetry) }
                // Our own, from a call whose answer was lost.
                if holder.lease == id { return registered(id) }
                // This very daemon's, on a lease it lost and etcd still has (etcd refreshes
                // leases when quorum returns): moved to the new lease.
                if let record = FleetMemberRecord(json: holder.value), record.bootID == identity.bootID, record.pid == identity.pid,
                   record.machineID == identity.machineID {
                    return reclaim(id, from: holder)
                }
                nameTaken(id, holder: FleetMemberRecord(json: holder.value)
                          ?? FleetMemberRecord(host: "unknown", machineID: "", bootID: "", pid: 0, since: ""), holderLease: holder.lease)
            case .failure(let error):
                lastCause = error.description
                retryRegistration(id, after: Self.registrationRetry)
            }
            publishGate()
        }
    }

    private func reclaim(_ id: Int64, from holder: EtcdKeyValue) {
        let key = keys.member(settings.name)
        let txn = EtcdTxn(compare: [EtcdCompare(key, .modRevision(holder.modRevision))], success: [.put(key: key, value: memberRecord.json, lease: id)])
        store.txn(txn, urgent: false, timeout: callTimeout) { [self] result in
            guard !stopped, lease.leaseID == id else { return }
            if case .success(let answer) = result, answer.succeeded { registered(id) } else { retryRegistration(id, after: Self.registrationRetry) }
            publishGate()
        }
    }

    private func registered(_ id: Int64) {
        if case .nameTaken(_, let holder, _) = duty {
            logger.notice("the member name \(settings.name) is free again (\(holder.description) is gone): taking fleet duty")
        }
        duty = .member(lease: id)
        dutyTimer?.cancel()
        dutyTimer = nil
        count("registrations")
        if lease.claimable == id { becameAvailable() }
    }

    private func nameTaken(_ id: Int64, holder: FleetMemberRecord, holderLease: Int64) {
        let known: FleetMemberRecord? = if case .nameTaken(_, let previous, _) = duty { previous } else { nil }
        duty = .nameTaken(lease: id, holder: holder, holderLease: holderLease)
        if known != holder {
            count("names_taken")
            let clone = holder.machineID == identity.machineID && !holder.machineID.isEmpty ? " It has this host's machine ID: a clone of one image? Give each host its own /etc/machine-id and [cluster] name." : ""
            logger.error("unable to take fleet duty: the member name \(settings.name) is held by another live member, \(holder.description); this host runs no fleet task or shared inbox file until that member's lease ends.\(clone)",
                         metadata: [JournalFields.messageIDKey: .string(MessageID.clusterUnavailable.rawValue), "holder": .string(holder.host)])
        }
        if unavailable != nil {
            let cause = heldCause
            unavailable?.cause = cause
            tell { $0.fleetAvailability(false, cause: cause) }
        } else {
            becameUnavailable(heldCause, since: nil)
        }
        // The watch tells when the holder's key goes; this is the backstop if it is down.
        retryRegistration(id, after: settings.leaseTTL)
    }

    private func retryRegistration(_ id: Int64, after delay: Duration) {
        if dutyTimer == nil {
            dutyTimer = clock.makeTimer(target: "fleet member registration") { [weak self] in
                guard let self, !self.stopped, let id = self.lease.leaseID else { return }
                if case .member = self.duty { return }
                self.register(id)
            }
        }
        dutyTimer?.schedule(at: clock.now + delay)
    }

    /// The holder of this host's name is gone (its key deleted): try to take the name.
    func memberNameFreed(holderLease: Int64) {
        guard case .nameTaken(let id, _, let held) = duty, held == holderLease, lease.leaseID == id else { return }
        register(id)
    }

    /// Before the lease is revoked at a clean stop: the member record says so, so that a
    /// host taking over a claim released by the revocation says why.
    func markStopping(then next: @escaping () -> Void) {
        guard case .member(let id) = duty, lease.leaseID == id else { return next() }
        var record = memberRecord
        record.stopping = true
        let key = keys.member(settings.name)
        store.txn(EtcdTxn(compare: [EtcdCompare(key, .lease(id))], success: [.put(key: key, value: record.json, lease: id)]), urgent: true,
                  timeout: .seconds(1)) { _ in next() }
    }

    var dutyDescription: (state: String, holder: String?) {
        switch duty {
        case .none: return ("none", nil)
        case .registering: return ("registering", nil)
        case .member: return ("member", nil)
        case .nameTaken(_, let holder, _): return ("name_taken", holder.description)
        }
    }
}
