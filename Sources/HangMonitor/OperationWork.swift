// Where an operation's work is stuck (docs/tasks.md, "Operations that never finish"). The task
// that runs `HangMonitor.watch` may only wait for work it handed to other tasks: Vapor's
// middleware awaits the route's future while the route runs in a task Vapor started with
// `Task {}`; a handler awaits the `value` of a task it started. The tasks that carry the
// operation's id (the task-local `Operations.current`: copied into the tasks started within it,
// read by its child tasks) are its work, and the culprit is where their chain of awaits ends.
import HangwatchSnapshot

enum OperationWork {
    /// Awaits followed at most.
    static let maximumSteps = 64

    /// The task where the work of the operation whose own task is `own` is stuck: from `own`,
    /// the task each awaits, to the end of the chain. When that is `own` itself, suspended on
    /// something that is no task (a continuation, a future), the operation's earliest other
    /// task (lowest id) that awaits no task of it — and from there, again the chain. `own` when
    /// the operation has no other task, or `own` runs (it blocks a thread itself).
    static func stuckTask(own: UInt64, tasks: [TaskSnapshot], ofOperation: Set<UInt64>) -> UInt64 {
        let byAddress = Dictionary(tasks.map { ($0.address, $0) }, uniquingKeysWith: { first, _ in first })
        let end = chainEnd(from: own, byAddress: byAddress)
        guard end == own, let task = byAddress[own], task.state == .suspended else { return end }
        // A reading in-process may also find copies of a task's bytes (a stack or buffer that
        // held them), with its id: none of the own task's is another task.
        let others = tasks.filter { $0.address != own && $0.id != task.id && ofOperation.contains($0.address) && !awaitsTask($0, of: ofOperation) }
        guard let first = others.min(by: { $0.id < $1.id }) else { return own }
        return chainEnd(from: first.address, byAddress: byAddress)
    }

    /// The last task of the chain of tasks awaited from `start` (cycles and length bounded).
    private static func chainEnd(from start: UInt64, byAddress: [UInt64: TaskSnapshot]) -> UInt64 {
        var current = start
        var seen: Set<UInt64> = [start]
        for _ in 0..<maximumSteps {
            guard let wait = byAddress[current]?.waitingOn, wait.kind == .task, byAddress[wait.address] != nil,
                  seen.insert(wait.address).inserted else { break }
            current = wait.address
        }
        return current
    }

    private static func awaitsTask(_ task: TaskSnapshot, of operation: Set<UInt64>) -> Bool {
        guard let wait = task.waitingOn, wait.kind == .task else { return false }
        return operation.contains(wait.address)
    }
}
