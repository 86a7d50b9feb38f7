// Turns overlapping address intervals into a partition of the address space: for every
// address, the containing interval of highest priority. Symbol tables, line tables and
// inline scopes all become such partitions in the symbol index (SymbolIndex.swift), so a
// lookup is one binary search whatever the nesting was.

struct AddressInterval {
    var low: UInt64
    var high: UInt64
    /// Higher wins where intervals overlap (compared as a tuple).
    var priority: (UInt64, UInt64, UInt64, UInt64)
    var value: UInt32
}

struct AddressPartition {
    /// Where each piece starts, ascending; a piece runs to the next start (the last to the end
    /// of the address space).
    private(set) var starts: [UInt64] = []
    /// The piece's value; nil where no interval covers it.
    private(set) var values: [UInt32?] = []

    init(_ intervals: [AddressInterval]) {
        let sorted = intervals.filter { $0.low < $0.high }.sorted { $0.low < $1.low }
        var points = sorted.flatMap { [$0.low, $0.high] }
        points.sort()
        var active = MaximumHeap()
        var next = 0
        var previous: UInt64?
        for point in points where point != previous {
            previous = point
            while next < sorted.count && sorted[next].low == point {
                active.push(sorted[next])
                next += 1
            }
            // Intervals ended at or before this point leave only when they come to the top:
            // nothing below the top is ever read.
            while let top = active.top, top.high <= point { active.popTop() }
            append(point, active.top?.value)
        }
    }

    private mutating func append(_ start: UInt64, _ value: UInt32?) {
        if let last = values.last, last == value { return }
        starts.append(start)
        values.append(value)
    }

    /// The value at `address`, nil when no interval covers it.
    func value(at address: UInt64) -> UInt32? {
        let low = countStarting(atOrBelow: address, count: starts.count) { starts[$0] }
        return low == 0 ? nil : values[low - 1]
    }
}

/// How many of `count` ascending starts (`start(i)`) lie at or below `address`: the piece,
/// symbol or row holding `address` is the one just before that index (none when it is 0).
/// Every address table of symbolication is searched this way.
func countStarting(atOrBelow address: UInt64, count: Int, start: (Int) -> UInt64) -> Int {
    var low = 0, high = count
    while low < high {
        let middle = (low + high) / 2
        if start(middle) <= address { low = middle + 1 } else { high = middle }
    }
    return low
}

/// A binary max-heap of intervals by priority (the stdlib has none, and the package does not
/// pull swift-collections into symbolication for one).
private struct MaximumHeap {
    private var items: [AddressInterval] = []

    var top: AddressInterval? { items.first }

    private static func above(_ a: AddressInterval, _ b: AddressInterval) -> Bool { a.priority > b.priority }

    mutating func push(_ item: AddressInterval) {
        items.append(item)
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard Self.above(items[child], items[parent]) else { break }
            items.swapAt(child, parent)
            child = parent
        }
    }

    mutating func popTop() {
        guard !items.isEmpty else { return }
        items.swapAt(0, items.count - 1)
        items.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < items.count && Self.above(items[left], items[largest]) { largest = left }
            if right < items.count && Self.above(items[right], items[largest]) { largest = right }
            if largest == parent { return }
            items.swapAt(parent, largest)
            parent = largest
        }
    }
}
