/// The watched directories of every owner as a tree of names, for the watch table: a
/// directory is its name and its parent's index, not its whole path. With a path per
/// directory (twice: as a map key and in the descriptor's entry) 100,000 watched
/// directories cost about 290 bytes each; here they cost a 32-byte node, the name's bytes,
/// and a slot or two of the indexes (docs/measurements/performance.md).
///
/// Nodes are found from the root by name: `children` is an open-addressing hash table of
/// node indexes keyed by (parent, name), hashed with the standard library's seeded Hasher,
/// so file names chosen to collide cannot turn lookups quadratic. A node stays while it
/// has a descriptor or children; freed nodes and their name bytes are reused or compacted.
///
/// A value type with no locking, kept on the watching queue by its owner.
struct DirectoryTree: Sendable {
    struct Node: Sendable {
        /// -1 for an owner's root; -2 for a free node.
        var parent: Int32
        var owner: Int32
        var nameStart: UInt32
        var nameLength: UInt32
        /// The descriptor's raw value, -1 when the directory is only an ancestor of watched ones.
        var wd: Int32
        /// The next node with the same descriptor, -1 at the end.
        var nextOfDescriptor: Int32
        var children: Int32
        var detached: Bool
    }

    private(set) var nodes: [Node] = []
    private var freeNodes: [Int32] = []
    private var names: [UInt8] = []
    private var deadNameBytes = 0
    /// Per owner index: its root node, -1 when it has none.
    private var roots: [Int32] = []
    /// (parent, name) → node; -1 empty, -2 deleted.
    private var children: [Int32] = []
    private var childSlotsUsed = 0
    private var childCount = 0

    private static let empty: Int32 = -1
    private static let deleted: Int32 = -2

    subscript(node: Int32) -> Node {
        get { nodes[Int(node)] }
        set { nodes[Int(node)] = newValue }
    }

    func isLive(_ node: Int32) -> Bool { nodes[Int(node)].parent != -2 }

    func root(of owner: Int32) -> Int32? {
        Int(owner) < roots.count && roots[Int(owner)] >= 0 ? roots[Int(owner)] : nil
    }

    /// The node of `relative` ("" for the root, components joined by "/"), if it exists.
    func find(owner: Int32, relative: [UInt8]) -> Int32? {
        guard var node = root(of: owner) else { return nil }
        var missing = false
        relative.withUnsafeBufferPointer { path in
            Self.forEachComponent(path) { name in
                guard let child = child(of: node, named: name) else {
                    missing = true
                    return false
                }
                node = child
                return true
            }
        }
        return missing ? nil : node
    }

    /// The node of `relative`, made with every missing ancestor.
    mutating func ensure(owner: Int32, relative: [UInt8]) -> Int32 {
        while roots.count <= Int(owner) { roots.append(-1) }
        var node = roots[Int(owner)]
        if node < 0 {
            node = allocate(Node(parent: -1, owner: owner, nameStart: 0, nameLength: 0, wd: -1, nextOfDescriptor: -1, children: 0, detached: false))
            roots[Int(owner)] = node
        }
        relative.withUnsafeBufferPointer { path in
            Self.forEachComponent(path) { name in
                if let child = child(of: node, named: name) {
                    node = child
                    return true
                }
                let start = UInt32(names.count)
                names.append(contentsOf: name)
                let child = allocate(Node(parent: node, owner: owner, nameStart: start, nameLength: UInt32(name.count), wd: -1,
                                          nextOfDescriptor: -1, children: 0, detached: false))
                self[node].children += 1
                insertChild(child)
                node = child
                return true
            }
        }
        return node
    }

    /// The node's path relative to its owner's root.
    func path(of node: Int32) -> [UInt8] {
        var components: [Int32] = []
        var current = node
        while self[current].parent >= 0 {
            components.append(current)
            current = self[current].parent
        }
        var path: [UInt8] = []
        for component in components.reversed() {
            if !path.isEmpty { path.append(UInt8(ascii: "/")) }
            let entry = self[component]
            path.append(contentsOf: names[Int(entry.nameStart)..<Int(entry.nameStart + entry.nameLength)])
        }
        return path
    }

    /// Whether `node` is `ancestor` or lies under it.
    func isWithin(_ node: Int32, _ ancestor: Int32) -> Bool {
        var current = node
        while current >= 0 {
            if current == ancestor { return true }
            current = self[current].parent
        }
        return false
    }

    /// Frees `node` and then each ancestor that has neither a descriptor nor children left.
    mutating func pruneIfUnused(_ node: Int32) {
        var current = node
        while current >= 0, isLive(current), self[current].wd < 0, self[current].children == 0 {
            let entry = self[current]
            if entry.parent >= 0 {
                removeChild(current)
                self[entry.parent].children -= 1
                deadNameBytes += Int(entry.nameLength)
            } else {
                roots[Int(entry.owner)] = -1
            }
            self[current].parent = -2
            freeNodes.append(current)
            current = entry.parent
        }
        if deadNameBytes > 65_536 && deadNameBytes > names.count / 2 { compactNames() }
    }

    // MARK: - Storage

    private mutating func allocate(_ node: Node) -> Int32 {
        if let reused = freeNodes.popLast() {
            self[reused] = node
            return reused
        }
        nodes.append(node)
        return Int32(nodes.count - 1)
    }

    private mutating func compactNames() {
        var compacted: [UInt8] = []
        compacted.reserveCapacity(names.count - deadNameBytes)
        for index in nodes.indices where nodes[index].parent >= 0 {
            let start = Int(nodes[index].nameStart)
            nodes[index].nameStart = UInt32(compacted.count)
            compacted.append(contentsOf: names[start..<(start + Int(nodes[index].nameLength))])
        }
        names = compacted
        deadNameBytes = 0
    }

    private static func forEachComponent(_ path: UnsafeBufferPointer<UInt8>, _ body: (UnsafeBufferPointer<UInt8>) -> Bool) {
        var start = 0
        while start < path.count {
            var end = start
            while end < path.count && path[end] != UInt8(ascii: "/") { end += 1 }
            if end > start, !body(UnsafeBufferPointer(rebasing: path[start..<end])) { return }
            start = end + 1
        }
    }

    // MARK: - The (parent, name) index

    private func hash(parent: Int32, name: UnsafeBufferPointer<UInt8>) -> Int {
        var hasher = Hasher()
        hasher.combine(parent)
        hasher.combine(bytes: UnsafeRawBufferPointer(name))
        return hasher.finalize()
    }

    private func hash(of node: Int32) -> Int {
        let entry = self[node]
        return names.withUnsafeBufferPointer { all in
            hash(parent: entry.parent, name: UnsafeBufferPointer(rebasing: all[Int(entry.nameStart)..<Int(entry.nameStart + entry.nameLength)]))
        }
    }

    private func named(_ node: Int32, _ name: UnsafeBufferPointer<UInt8>) -> Bool {
        let entry = self[node]
        guard Int(entry.nameLength) == name.count else { return false }
        return names.withUnsafeBufferPointer { all in
            all[Int(entry.nameStart)..<Int(entry.nameStart + entry.nameLength)].elementsEqual(name)
        }
    }

    func child(of parent: Int32, named name: UnsafeBufferPointer<UInt8>) -> Int32? {
        guard !children.isEmpty else { return nil }
        let mask = children.count - 1
        var slot = hash(parent: parent, name: name) & mask
        while true {
            let node = children[slot]
            if node == Self.empty { return nil }
            if node >= 0 && self[node].parent == parent && named(node, name) { return node }
            slot = (slot + 1) & mask
        }
    }

    private mutating func insertChild(_ node: Int32) {
        if (childSlotsUsed + 1) * 2 > children.count { rehash(minimumLive: childCount + 1) }
        let mask = children.count - 1
        var slot = hash(of: node) & mask
        while children[slot] >= 0 { slot = (slot + 1) & mask }
        if children[slot] == Self.empty { childSlotsUsed += 1 }
        children[slot] = node
        childCount += 1
    }

    private mutating func removeChild(_ node: Int32) {
        let mask = children.count - 1
        var slot = hash(of: node) & mask
        while children[slot] != node { slot = (slot + 1) & mask }
        children[slot] = Self.deleted
        childCount -= 1
    }

    /// Room for at least twice the live entries; the deleted markers go.
    private mutating func rehash(minimumLive: Int) {
        var capacity = 16
        while capacity < minimumLive * 2 { capacity <<= 1 }
        let old = children
        children = [Int32](repeating: Self.empty, count: capacity)
        childSlotsUsed = 0
        childCount = 0
        for node in old where node >= 0 { insertChild(node) }
    }
}
