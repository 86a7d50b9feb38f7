// The JSON spelling of the typed report model (docs/report-schema.md, "Conventions"):
// addresses and register values "0x" + 16 lowercase hex digits, module offsets "0x" + minimal
// hex, times ISO-8601 UTC with milliseconds. Keys and optionality are those the synthesized
// conformances had (an optional key is omitted when nil): reports written before the model
// was typed decode, and render to the same bytes (Tests/Fixtures/data/reports).
// Types with no such field (ProcessIdentity, CPUTime, Context, Termination) keep synthesized Codable.
// A report's thread, module and signal are the snapshot's (ThreadInfo, ModuleSnapshot,
// SignalInfo) plus what processing added: each has this one Codable, flat as the schema has it.
import HangwatchSnapshot

extension Report: Codable {
    private enum CodingKeys: String, CodingKey {
        case schemaVersion, id, kind, timestamp, incomplete, process, threads, modules, annotations, hang, signal,
             captureDurationSeconds, context, profile, runID, processTree, redacted, killed, tasks, lockCycles
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            schemaVersion: try container.decode(Int.self, forKey: .schemaVersion),
            id: try container.decode(String.self, forKey: .id),
            kind: try container.decode(ReportKind.self, forKey: .kind),
            timestamp: try container.decodeTime(forKey: .timestamp),
            incomplete: try container.decode(Bool.self, forKey: .incomplete),
            process: try container.decode(Process.self, forKey: .process),
            threads: try container.decode([Thread].self, forKey: .threads),
            modules: try container.decode([Module].self, forKey: .modules),
            annotations: try container.decode([String: String].self, forKey: .annotations),
            hang: try container.decodeIfPresent(Hang.self, forKey: .hang),
            signal: try container.decodeIfPresent(Signal.self, forKey: .signal),
            captureDurationSeconds: try container.decode(Double.self, forKey: .captureDurationSeconds),
            context: try container.decodeIfPresent(Context.self, forKey: .context))
        profile = try container.decodeIfPresent(Profile.self, forKey: .profile)
        runID = try container.decodeIfPresent(String.self, forKey: .runID)
        processTree = try container.decodeIfPresent(ProcessTree.self, forKey: .processTree)
        redacted = try container.decodeIfPresent([String].self, forKey: .redacted)
        killed = try container.decodeIfPresent(Killed.self, forKey: .killed)
        tasks = try container.decodeIfPresent(Tasks.self, forKey: .tasks)
        lockCycles = try container.decodeIfPresent([[Int32]].self, forKey: .lockCycles)
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(schemaVersion, forKey: .schemaVersion)
        try container.encode(id, forKey: .id)
        try container.encode(kind, forKey: .kind)
        try container.encode(Timestamp.iso8601(timestamp), forKey: .timestamp)
        try container.encode(incomplete, forKey: .incomplete)
        try container.encode(process, forKey: .process)
        try container.encode(threads, forKey: .threads)
        try container.encode(modules, forKey: .modules)
        try container.encode(annotations, forKey: .annotations)
        try container.encodeIfPresent(hang, forKey: .hang)
        try container.encodeIfPresent(signal, forKey: .signal)
        try container.encode(captureDurationSeconds, forKey: .captureDurationSeconds)
        try container.encodeIfPresent(context, forKey: .context)
        try container.encodeIfPresent(profile, forKey: .profile)
        try container.encodeIfPresent(runID, forKey: .runID)
        try container.encodeIfPresent(processTree, forKey: .processTree)
        try container.encodeIfPresent(redacted, forKey: .redacted)
        try container.encodeIfPresent(killed, forKey: .killed)
        try container.encodeIfPresent(tasks, forKey: .tasks)
        try container.encodeIfPresent(lockCycles, forKey: .lockCycles)
    }
}

extension Report.Killed: Codable {
    private enum CodingKeys: String, CodingKey {
        case cause, signal, explanation, evidence, startTime, lastSeenAlive, memoryCgroup, samples, lastLiveness
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let cause = try container.decode(String.self, forKey: .cause)
        self.init(
            // A cause a newer writer added reads as unknown.
            cause: KillCause(rawValue: cause) ?? .unknown,
            signal: try container.decodeIfPresent(String.self, forKey: .signal),
            explanation: try container.decode(String.self, forKey: .explanation),
            evidence: try container.decode([String].self, forKey: .evidence),
            startTime: try container.contains(.startTime) ? container.decodeTime(forKey: .startTime) : nil,
            lastSeenAlive: try container.contains(.lastSeenAlive) ? container.decodeTime(forKey: .lastSeenAlive) : nil,
            memoryCgroup: try container.decodeIfPresent(Report.MemoryCgroupState.self, forKey: .memoryCgroup),
            samples: try container.decode([Report.StateSample].self, forKey: .samples),
            lastLiveness: try container.decodeIfPresent(String.self, forKey: .lastLiveness))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(cause.rawValue, forKey: .cause)
        try container.encodeIfPresent(signal, forKey: .signal)
        try container.encode(explanation, forKey: .explanation)
        try container.encode(evidence, forKey: .evidence)
        try container.encodeIfPresent(startTime.map(Timestamp.iso8601), forKey: .startTime)
        try container.encodeIfPresent(lastSeenAlive.map(Timestamp.iso8601), forKey: .lastSeenAlive)
        try container.encodeIfPresent(memoryCgroup, forKey: .memoryCgroup)
        try container.encode(samples, forKey: .samples)
        try container.encodeIfPresent(lastLiveness, forKey: .lastLiveness)
    }
}

extension Report.StateSample: Codable {
    private enum CodingKeys: String, CodingKey { case time, residentBytes, threads, hangs }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(time: try container.decodeTime(forKey: .time),
                  residentBytes: try container.decode(UInt64.self, forKey: .residentBytes),
                  threads: try container.decode(Int.self, forKey: .threads),
                  hangs: try container.decodeIfPresent([String].self, forKey: .hangs))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Timestamp.iso8601(time), forKey: .time)
        try container.encode(residentBytes, forKey: .residentBytes)
        try container.encode(threads, forKey: .threads)
        try container.encodeIfPresent(hangs, forKey: .hangs)
    }
}

extension Report.Thread: Codable {
    private enum CodingKeys: String, CodingKey {
        case tid, name, state, syscall, syscallName, cpuSeconds, status, roles, queueLabel, registers, frames, waitsFor
    }

    private enum LockKeys: String, CodingKey { case kind, address, holderTid, unknown, label }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        var registers: [String: UInt64]?
        if let named = try container.decodeIfPresent([String: String].self, forKey: .registers) {
            registers = try named.mapValues { text in
                guard let value = ReportFormatting.parseHex(text) else {
                    throw DecodingError.dataCorruptedError(forKey: .registers, in: container,
                                                           debugDescription: "register value \"\(text)\" is not hex")
                }
                return value
            }
        }
        let info = ThreadInfo(
            tid: try container.decode(Int32.self, forKey: .tid),
            name: try container.decode(String.self, forKey: .name),
            state: ThreadState(letter: try container.decode(String.self, forKey: .state)),
            syscall: try container.decodeIfPresent(String.self, forKey: .syscall),
            cpuSeconds: try container.decode(CPUTime.self, forKey: .cpuSeconds),
            roles: ThreadRoles(names: try container.decode([String].self, forKey: .roles)),
            status: try Self.status(container.decode(String.self, forKey: .status), in: container),
            queueLabel: try container.decodeIfPresent(String.self, forKey: .queueLabel),
            lockWait: try Self.lockWait(in: container))
        self.init(info: info, registers: registers, frames: try container.decode([Report.Frame].self, forKey: .frames),
                  syscallName: try container.decodeIfPresent(String.self, forKey: .syscallName))
    }

    /// `waitsFor`: a kind a later build adds reads as unknown.
    private static func lockWait(in container: KeyedDecodingContainer<CodingKeys>) throws -> LockWait? {
        guard container.contains(.waitsFor) else { return nil }
        let lock = try container.nestedContainer(keyedBy: LockKeys.self, forKey: .waitsFor)
        return LockWait(kind: LockKind(rawValue: try lock.decode(String.self, forKey: .kind)) ?? .unknown,
                        address: try lock.decodeHex(forKey: .address),
                        holder: try lock.decodeIfPresent(Int32.self, forKey: .holderTid),
                        unknown: try lock.decodeIfPresent(String.self, forKey: .unknown),
                        label: try lock.decodeIfPresent(String.self, forKey: .label))
    }

    private static func status(_ name: String, in container: KeyedDecodingContainer<CodingKeys>) throws -> ThreadCaptureStatus {
        guard let status = ThreadCaptureStatus(name: name) else {
            throw DecodingError.dataCorruptedError(forKey: .status, in: container, debugDescription: "unknown thread status \"\(name)\"")
        }
        return status
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(info.tid, forKey: .tid)
        try container.encode(info.name, forKey: .name)
        try container.encode(info.state.letter, forKey: .state)
        try container.encodeIfPresent(info.syscall, forKey: .syscall)
        try container.encodeIfPresent(syscallName, forKey: .syscallName)
        try container.encode(info.cpuSeconds, forKey: .cpuSeconds)
        try container.encode(info.status.name, forKey: .status)
        try container.encode(info.roles.names, forKey: .roles)
        try container.encodeIfPresent(info.queueLabel, forKey: .queueLabel)
        // Strings even for small values: a JSON number is a double to most readers (2^53).
        try container.encodeIfPresent(registers?.mapValues(ReportFormatting.address), forKey: .registers)
        try container.encode(frames, forKey: .frames)
        if let wait = info.lockWait {
            var lock = container.nestedContainer(keyedBy: LockKeys.self, forKey: .waitsFor)
            try lock.encode(wait.kind.rawValue, forKey: .kind)
            try lock.encode(ReportFormatting.address(wait.address), forKey: .address)
            try lock.encodeIfPresent(wait.holder, forKey: .holderTid)
            try lock.encodeIfPresent(wait.unknown, forKey: .unknown)
            try lock.encodeIfPresent(wait.label, forKey: .label)
        }
    }
}

extension Report.Task: Codable {
    private enum CodingKeys: String, CodingKey {
        case id, address, state, name, flags, parentID, waitingOn, waitingOnTaskID, frames, chainCut, unchangedSeconds, operation
        case traceparent
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let info = TaskInfo(
            id: try container.decode(UInt64.self, forKey: .id),
            address: try container.decodeHex(forKey: .address),
            // A state a later build adds reads as suspended (the state that asks nothing of a reader).
            state: TaskState(rawValue: try container.decode(String.self, forKey: .state)) ?? .suspended,
            name: try container.decodeIfPresent(String.self, forKey: .name),
            flags: TaskFlags(names: try container.decode([String].self, forKey: .flags)),
            chainCut: try container.decodeIfPresent(Bool.self, forKey: .chainCut) ?? false)
        self.init(
            info: info,
            parentID: try container.decodeIfPresent(UInt64.self, forKey: .parentID),
            waitingOn: try container.decodeIfPresent(String.self, forKey: .waitingOn),
            waitingOnTaskID: try container.decodeIfPresent(UInt64.self, forKey: .waitingOnTaskID),
            frames: try container.decode([Report.Frame].self, forKey: .frames),
            unchangedSeconds: try container.decodeIfPresent(Double.self, forKey: .unchangedSeconds),
            operation: try container.decodeIfPresent(String.self, forKey: .operation),
            traceparent: try container.decodeIfPresent(String.self, forKey: .traceparent))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(info.id, forKey: .id)
        try container.encode(ReportFormatting.address(info.address), forKey: .address)
        try container.encode(info.state.rawValue, forKey: .state)
        try container.encodeIfPresent(info.name, forKey: .name)
        try container.encode(info.flags.names, forKey: .flags)
        try container.encodeIfPresent(parentID, forKey: .parentID)
        try container.encodeIfPresent(waitingOn, forKey: .waitingOn)
        try container.encodeIfPresent(waitingOnTaskID, forKey: .waitingOnTaskID)
        try container.encode(frames, forKey: .frames)
        if info.chainCut { try container.encode(true, forKey: .chainCut) }
        try container.encodeIfPresent(unchangedSeconds, forKey: .unchangedSeconds)
        try container.encodeIfPresent(operation, forKey: .operation)
        try container.encodeIfPresent(traceparent, forKey: .traceparent)
    }
}

extension Report.Frame: Codable {
    private enum CodingKeys: String, CodingKey {
        case index, address, module, moduleOffset, function, offset, file, line, column, inlined, symbolsUnavailable
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            index: try container.decode(Int.self, forKey: .index),
            address: try container.decodeHex(forKey: .address),
            module: try container.decodeIfPresent(String.self, forKey: .module),
            moduleOffset: try container.decodeHexIfPresent(forKey: .moduleOffset),
            function: try container.decodeIfPresent(String.self, forKey: .function),
            offset: try container.decodeIfPresent(UInt64.self, forKey: .offset),
            file: try container.decodeIfPresent(String.self, forKey: .file),
            line: try container.decodeIfPresent(Int.self, forKey: .line),
            column: try container.decodeIfPresent(Int.self, forKey: .column),
            inlined: try container.decode(Bool.self, forKey: .inlined),
            symbolsUnavailable: try container.decodeIfPresent(String.self, forKey: .symbolsUnavailable))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(index, forKey: .index)
        try container.encode(ReportFormatting.address(address), forKey: .address)
        try container.encodeIfPresent(module, forKey: .module)
        try container.encodeIfPresent(moduleOffset.map(ReportFormatting.offset), forKey: .moduleOffset)
        try container.encodeIfPresent(function, forKey: .function)
        try container.encodeIfPresent(offset, forKey: .offset)
        try container.encodeIfPresent(file, forKey: .file)
        try container.encodeIfPresent(line, forKey: .line)
        try container.encodeIfPresent(column, forKey: .column)
        try container.encode(inlined, forKey: .inlined)
        try container.encodeIfPresent(symbolsUnavailable, forKey: .symbolsUnavailable)
    }
}

extension Report.Module: Codable {
    private enum CodingKeys: String, CodingKey {
        case path, base, start, end, buildID, symbols, symbolFile, symbolsNote
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let snapshot = ModuleSnapshot(
            path: try container.decode(String.self, forKey: .path),
            base: try container.decodeHex(forKey: .base),
            start: try container.decodeHex(forKey: .start),
            end: try container.decodeHex(forKey: .end),
            buildID: try container.decode(String.self, forKey: .buildID))
        self.init(
            snapshot: snapshot,
            symbols: try container.decodeIfPresent(String.self, forKey: .symbols),
            symbolFile: try container.decodeIfPresent(String.self, forKey: .symbolFile),
            symbolsNote: try container.decodeIfPresent(String.self, forKey: .symbolsNote))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(snapshot.path, forKey: .path)
        try container.encode(ReportFormatting.address(snapshot.base), forKey: .base)
        try container.encode(ReportFormatting.address(snapshot.start), forKey: .start)
        try container.encode(ReportFormatting.address(snapshot.end), forKey: .end)
        try container.encode(snapshot.buildID, forKey: .buildID)
        try container.encodeIfPresent(symbols, forKey: .symbols)
        try container.encodeIfPresent(symbolFile, forKey: .symbolFile)
        try container.encodeIfPresent(symbolsNote, forKey: .symbolsNote)
    }
}

extension Report.Hang: Codable {
    private enum CodingKeys: String, CodingKey {
        case target, thresholdSeconds, durationSeconds, recovered, samples, startTime, sampledThreads, foldedStacks, operations
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            target: try container.decode(HangTarget.self, forKey: .target),
            thresholdSeconds: try container.decode(Double.self, forKey: .thresholdSeconds),
            durationSeconds: try container.decode(Double.self, forKey: .durationSeconds),
            recovered: try container.decode(Bool.self, forKey: .recovered),
            samples: try container.decode(Int.self, forKey: .samples),
            startTime: try container.decodeTime(forKey: .startTime),
            sampledThreads: try container.decode([Int32].self, forKey: .sampledThreads),
            stacks: try container.decodeFoldedStacks(forKey: .foldedStacks),
            operations: Array((try container.decodeIfPresent([Operation].self, forKey: .operations) ?? [])
                .prefix(RunningOperation.maximumCount)))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(target, forKey: .target)
        try container.encode(thresholdSeconds, forKey: .thresholdSeconds)
        try container.encode(durationSeconds, forKey: .durationSeconds)
        try container.encode(recovered, forKey: .recovered)
        try container.encode(samples, forKey: .samples)
        try container.encode(Timestamp.iso8601(startTime), forKey: .startTime)
        try container.encode(sampledThreads, forKey: .sampledThreads)
        try container.encode(stacks.map(ReportRenderer.foldedLine), forKey: .foldedStacks)
        if !operations.isEmpty { try container.encode(operations, forKey: .operations) }
    }
}

extension Report.Hang.Operation: Codable {
    private enum CodingKeys: String, CodingKey {
        case name, startTime, limitSeconds, taskID, thread, onHungThread, traceparent
    }

    /// Decodes the JSON docs/report-schema.md describes (a name past 256 bytes is cut).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            name: RunningOperation(name: try container.decode(String.self, forKey: .name), startTime: 0, limitSeconds: 0,
                                   task: 0, thread: 0).name,
            startTime: try container.decodeTime(forKey: .startTime),
            limitSeconds: try container.decode(Double.self, forKey: .limitSeconds),
            taskID: try container.decodeIfPresent(UInt64.self, forKey: .taskID),
            thread: try container.decode(Int32.self, forKey: .thread),
            onHungThread: try container.decode(Bool.self, forKey: .onHungThread),
            traceparent: try container.decodeIfPresent(String.self, forKey: .traceparent))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encode(Timestamp.iso8601(startTime), forKey: .startTime)
        try container.encode(limitSeconds, forKey: .limitSeconds)
        try container.encodeIfPresent(taskID, forKey: .taskID)
        try container.encode(thread, forKey: .thread)
        try container.encode(onHungThread, forKey: .onHungThread)
        try container.encodeIfPresent(traceparent, forKey: .traceparent)
    }
}

extension Report.Profile: Codable {
    private enum CodingKeys: String, CodingKey {
        case samples, intervalSeconds, sampledThreads, foldedStacks
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(samples: try container.decode(Int.self, forKey: .samples),
                  intervalSeconds: try container.decode(Double.self, forKey: .intervalSeconds),
                  sampledThreads: try container.decode([Int32].self, forKey: .sampledThreads),
                  stacks: try container.decodeFoldedStacks(forKey: .foldedStacks))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(samples, forKey: .samples)
        try container.encode(intervalSeconds, forKey: .intervalSeconds)
        try container.encode(sampledThreads, forKey: .sampledThreads)
        try container.encode(stacks.map(ReportRenderer.foldedLine), forKey: .foldedStacks)
    }
}

extension KeyedDecodingContainer {
    /// `foldedStacks`: "root;…;leaf count" lines, the folded form's only reader.
    fileprivate func decodeFoldedStacks(forKey key: Key) throws -> [Report.SampledStack] {
        try decode([String].self, forKey: key).map { line in
            guard let space = line.lastIndex(of: " "), let count = Int(line[line.index(after: space)...]), count > 0 else {
                throw DecodingError.dataCorruptedError(forKey: key, in: self,
                                                       debugDescription: "a folded stack without a sample count: \"\(line.prefix(200))\"")
            }
            return Report.SampledStack(frames: line[..<space].split(separator: ";", omittingEmptySubsequences: false).map(String.init),
                                       count: count)
        }
    }
}

extension Report.Signal: Codable {
    private enum CodingKeys: String, CodingKey {
        case number, name, code, codeName, address, tid, message
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let info = SignalInfo(
            number: try container.decode(Int32.self, forKey: .number),
            code: try container.decode(Int32.self, forKey: .code),
            address: try container.decodeHex(forKey: .address),
            tid: try container.decode(Int32.self, forKey: .tid),
            message: try container.decodeIfPresent(String.self, forKey: .message))
        self.init(info: info, name: try container.decode(String.self, forKey: .name),
                  codeName: try container.decodeIfPresent(String.self, forKey: .codeName))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(info.number, forKey: .number)
        try container.encode(name, forKey: .name)
        try container.encode(info.code, forKey: .code)
        try container.encodeIfPresent(codeName, forKey: .codeName)
        try container.encode(ReportFormatting.address(info.address), forKey: .address)
        try container.encode(info.tid, forKey: .tid)
        try container.encodeIfPresent(info.message, forKey: .message)
    }
}

// Also the shape of the note HangMonitor leaves beside an unprocessed dump
// (Sources/HangMonitor/DatabaseHangCapture.swift, attachContext), which DumpProcessor decodes.
extension Report.SupersededHang: Codable {
    private enum CodingKeys: String, CodingKey {
        case target, thresholdSeconds, durationSeconds, startTime, reportID
    }

    /// Decodes the JSON docs/report-schema.md describes.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            target: try container.decode(HangTarget.self, forKey: .target),
            thresholdSeconds: try container.decode(Double.self, forKey: .thresholdSeconds),
            durationSeconds: try container.decode(Double.self, forKey: .durationSeconds),
            startTime: try container.decodeTime(forKey: .startTime),
            reportID: try container.decodeIfPresent(String.self, forKey: .reportID))
    }

    /// Encodes the JSON docs/report-schema.md describes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(target, forKey: .target)
        try container.encode(thresholdSeconds, forKey: .thresholdSeconds)
        try container.encode(durationSeconds, forKey: .durationSeconds)
        try container.encode(Timestamp.iso8601(startTime), forKey: .startTime)
        try container.encodeIfPresent(reportID, forKey: .reportID)
    }
}

// Reading the spellings back. A value that is not one is a malformed report (its path is in
// the error), never a silent 0.
extension KeyedDecodingContainer {
    fileprivate func decodeHex(forKey key: Key) throws -> UInt64 {
        let text = try decode(String.self, forKey: key)
        guard let value = ReportFormatting.parseHex(text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: "\"\(text)\" is not a hex number")
        }
        return value
    }

    fileprivate func decodeHexIfPresent(forKey key: Key) throws -> UInt64? {
        try contains(key) && !decodeNil(forKey: key) ? decodeHex(forKey: key) : nil
    }

    fileprivate func decodeTime(forKey key: Key) throws -> Double {
        let text = try decode(String.self, forKey: key)
        guard let seconds = Timestamp.parseISO8601(text) else {
            throw DecodingError.dataCorruptedError(forKey: key, in: self,
                                                   debugDescription: "\"\(text)\" is not an ISO-8601 UTC time")
        }
        return seconds
    }
}
