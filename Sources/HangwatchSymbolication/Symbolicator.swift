// Offline symbolication of captured addresses (never used in a signal handler). Each
// module file is opened once through elfutils and cached, keyed by path and build-id, so a
// long `show`/`process` run does not reopen ELF files for every frame. What each lookup gave is
// kept as the module's answers (SymbolIndex.swift); with a symbol cache they are stored after a
// report and read back by later runs, which open the module only for addresses not answered yet.
import HangwatchPlatform
import HangwatchSnapshot
import CHangwatchSymbols
import FoundationEssentials

package final class Symbolicator: @unchecked Sendable {
    /// Directories searched for separate debug files (`<dir>/.build-id/xx/yyyy.debug`, and
    /// elfutils' by-name rules); absolute paths.
    package let debugDirectories: [String]
    /// Open module files kept at most; the least recently used is closed beyond that.
    package let maximumOpenModules: Int
    /// File:line and inline frames for system libraries (/lib, /usr/lib) too. Off: their
    /// frames get names from symbol tables only (of the separate debug file when there is
    /// one), which avoids decompressing e.g. libc6-dbg's DWARF — most of a cold run's time.
    package let systemLibraryLines: Bool
    /// Where module indexes are kept between runs; nil: libdw for every lookup.
    package let cache: SymbolCache?
    /// Breakpad symbol stores (BreakpadSymbolStore.swift), asked for a module whose file no
    /// longer has the recorded build-id.
    package let symbolStores: [String]
    /// debuginfod servers, asked last for such a module (opt-in; Debuginfod.swift).
    package let debuginfod: Debuginfod?

    // elfutils 0.188 is not built thread-safe (libelf/libdw keep shared state), so every
    // Symbolicator in the process takes this one lock around its caches and libdw calls.
    private static let libdwLock = Lock()
    private var lock: Lock { Self.libdwLock }
    private var resolutions: [ModuleKey: ModuleResolution] = [:]
    private var openModules: [ModuleKey: OpenModule] = [:]
    private var systemSymbols: [ModuleKey: ELFSymbolTable?] = [:]
    private var answers: [ModuleKey: ModuleAnswers] = [:]
    private var breakpadFiles: [ModuleKey: BreakpadSymbolFile] = [:]
    private var demangled = DemangledNames()
    private var noticed: [String] = []
    private var moduleNotes: [ModuleKey: String] = [:]
    private var useClock: UInt64 = 0

    // The recorded identity: a file replaced on disk is recorded with another build-id and
    // so gets its own resolution and handle.
    private struct ModuleKey: Hashable {
        var path: String
        var buildID: String
        init(_ module: ModuleSnapshot) {
            path = module.path
            buildID = module.buildID.lowercased()
        }
    }

    private final class OpenModule {
        let handle: OpaquePointer?  // nil: opening failed, remembered so it is not retried
        let failure: String?
        var lastUse: UInt64
        init(handle: OpaquePointer?, failure: String?, lastUse: UInt64) {
            self.handle = handle
            self.failure = failure
            self.lastUse = lastUse
        }
        deinit { if let handle { hws_module_close(handle) } }
    }

    /// A module's answers: those its cache entry holds, and those looked up since (to store).
    private final class ModuleAnswers {
        let cacheKey: SymbolCache.Key?
        let namesOnly: Bool
        var stored: SymbolIndex?
        var fresh: [UInt64: [IndexedFrame]] = [:]
        init(cacheKey: SymbolCache.Key?, namesOnly: Bool, stored: SymbolIndex?) {
            self.cacheKey = cacheKey
            self.namesOnly = namesOnly
            self.stored = stored
        }

        func known(_ offset: UInt64) -> [IndexedFrame]? {
            if let found = fresh[offset] { return found }
            guard let stored, stored.isWhole, let found = stored.answer(at: offset) else { return nil }
            // Its file cut short under us (chunks read as zeros): not to be trusted.
            return stored.isWhole ? found : nil
        }

        func add(_ offset: UInt64, _ frames: [IndexedFrame]) {
            if fresh.count < SymbolIndex.maximumAnswers { fresh[offset] = frames }
        }
    }

    package convenience init(debugDirectories: [String] = ["/usr/lib/debug"], maximumOpenModules: Int = 256, cache: SymbolCache? = nil,
                             symbolStores: [String] = [], debuginfod: Debuginfod? = nil) {
        self.init(debugDirectories: debugDirectories, maximumOpenModules: maximumOpenModules, systemLibraryLines: false, cache: cache,
                  symbolStores: symbolStores, debuginfod: debuginfod)
    }

    package init(debugDirectories: [String], maximumOpenModules: Int, systemLibraryLines: Bool, cache: SymbolCache? = nil,
                 symbolStores: [String] = [], debuginfod: Debuginfod? = nil) {
        self.debuginfod = debuginfod
        self.debugDirectories = debugDirectories.filter { $0.hasPrefix("/") }
        self.maximumOpenModules = max(1, maximumOpenModules)
        self.systemLibraryLines = systemLibraryLines
        self.cache = cache
        self.symbolStores = symbolStores.filter { $0.hasPrefix("/") }
    }

    deinit {
        // Closing libdw handles is libdw work too: under the shared lock.
        lock.lock()
        openModules.removeAll()
        lock.unlock()
    }

    /// Frames for one captured address, innermost inlined function first, the real
    /// function last. Return addresses (every frame but frame 0 of a stack) are looked up at
    /// address-1 so they land in the call instruction's line, not the next statement's.
    /// Always returns at least one frame; an address outside every module keeps only its
    /// address, one whose module has no usable symbols keeps module and offset.
    package func symbolicate(address: UInt64, isReturnAddress: Bool, modules: [ModuleSnapshot]) -> [SymbolicatedFrame] {
        guard let module = Self.module(containing: address, in: modules) else {
            return [SymbolicatedFrame(address: address)]
        }
        let moduleOffset = address &- module.base
        var bare = SymbolicatedFrame(address: address, modulePath: module.path, moduleOffset: moduleOffset)

        lock.lock()
        defer { lock.unlock() }
        let key = ModuleKey(module)
        let resolution = resolveLocked(key)
        guard let symbolFile = resolution.symbolFile else {
            bare.symbolsUnavailableReason = resolution.unavailableReason
            return [bare]
        }
        let lookupOffset = isReturnAddress && moduleOffset > 0 ? moduleOffset - 1 : moduleOffset
        let adjustment: UInt64 = lookupOffset == moduleOffset ? 0 : 1
        if let symbols = breakpadFiles[key] {
            let found = symbols.frames(at: lookupOffset)
            if found.isEmpty { return [bare] }
            return found.map { frame in
                var result = bare
                result.function = frame.function
                result.file = frame.file
                result.line = frame.line
                result.functionOffset = frame.functionOffset.map { $0 &+ adjustment }
                result.isInlined = frame.inlined
                return result
            }
        }
        switch answerLocked(key, symbolFile: symbolFile, at: lookupOffset) {
        case .failure(let failure):
            bare.symbolsUnavailableReason = failure.reason
            return [bare]
        case .success(let found):
            if found.isEmpty { return [bare] }
            return found.map { frame in
                var result = bare
                result.function = frame.function.map { demangled($0) }
                result.file = frame.file
                if frame.line > 0 { result.line = frame.line }
                if frame.column > 0 { result.column = frame.column }
                result.functionOffset = frame.functionOffset.map { $0 &+ adjustment }
                result.isInlined = frame.isInlined
                return result
            }
        }
    }

    /// Answers the lookups a report is about to make, then stores each module's new answers in
    /// the symbol cache. A module answered before (this report's stacks seen in an earlier run)
    /// is not opened at all; for the addresses still unknown, each module read through libdw
    /// chooses their symbols in one pass over its symbol table instead of sorting the whole
    /// table for them (`hws_module_prime_symbols`), what a first report of a never-seen binary
    /// pays most for, and a system library read for names alone keeps just the symbols those
    /// addresses need. The answers are the same either way; a lookup not named here still gets
    /// its frames. A module named by a Breakpad file reads it once for all its lookups.
    package func prime(_ lookups: [(address: UInt64, isReturnAddress: Bool)], modules: [ModuleSnapshot]) {
        // Lookup offsets per module (by its index in `modules`): a report's thousands of frames
        // are a few dozen addresses, so they are made unique first.
        let distinct = lookups.sorted { ($0.address, $0.isReturnAddress ? 1 : 0) < ($1.address, $1.isReturnAddress ? 1 : 0) }
        var offsets = [[UInt64]](repeating: [], count: modules.count)
        var previous: (address: UInt64, isReturnAddress: Bool)?
        for lookup in distinct {
            if let previous, previous == lookup { continue }
            previous = lookup
            guard let moduleIndex = Self.moduleIndex(containing: lookup.address, in: modules) else { continue }
            let moduleOffset = lookup.address &- modules[moduleIndex].base
            offsets[moduleIndex].append(lookup.isReturnAddress && moduleOffset > 0 ? moduleOffset - 1 : moduleOffset)
        }
        lock.lock()
        defer { lock.unlock() }
        for (index, moduleOffsets) in offsets.enumerated() where !moduleOffsets.isEmpty {
            let key = ModuleKey(modules[index])
            // The path `symbolicate` takes for this module.
            guard let symbolFile = resolveLocked(key).symbolFile else { continue }
            if let symbols = breakpadFiles[key] {
                symbols.prepare(for: moduleOffsets)  // one reading of the .sym file for them all
                continue
            }
            let known = answersLocked(key, symbolFile: symbolFile)
            let unknown = moduleOffsets.filter { known.known($0) == nil }
            guard !unknown.isEmpty else { continue }
            if isNamesOnly(key, symbolFile: symbolFile) {
                // Its names: a table for these addresses alone, from the same file as the whole one.
                if systemSymbols[key] == nil, unknown.count <= ELFSymbolTable.primeLimit {
                    let table = Self.namesTable(debugFile: debugFile(forBuildID: key.buildID), library: key.path) {
                        ELFSymbolTable(path: $0, near: unknown)
                    }
                    systemSymbols[key] = .some(table)
                }
            } else if let handle = openLocked(symbolFile, for: key).handle {
                _ = unknown.withUnsafeBufferPointer { hws_module_prime_symbols(handle, $0.baseAddress, $0.count) }
            }
            for offset in unknown { _ = answerLocked(key, symbolFile: symbolFile, at: offset) }
            storeAnswersLocked(key)
            if let handle = openModules[key]?.handle {
                hws_module_release_pages(handle)
                let over = hws_module_units_over_bounds(handle)
                if over > 0 {
                    moduleNotes[key] = "\(over) compilation unit\(over == 1 ? "" : "s") with more functions than hangwatch reads for one (524,288): no inline frames there"
                }
            }
        }
    }

    /// Stores every module's answers not stored yet in the symbol cache (a report's are stored by
    /// `prime`; lookups made without it, by this).
    package func storeAnswers() {
        lock.lock()
        defer { lock.unlock() }
        for key in answers.keys { storeAnswersLocked(key) }
    }

    /// What lookups cost beyond their priming, for tests: lookups the sorted symbol tables
    /// answered, and system libraries whose names were read whole. Both 0 after a report whose
    /// lookups were all primed.
    package var unprimedWork: (tableAnswers: Int, wholeNameTables: Int) {
        lock.lock()
        defer { lock.unlock() }
        let answers = openModules.values.reduce(0) { $0 + Int($1.handle.map { hws_module_symbol_table_answers($0) } ?? 0) }
        return (answers, systemSymbols.values.filter { $0.map { $0.madeFor == nil } ?? false }.count)
    }

    /// How many module files this symbolicator opened (through libdw): 0 when every lookup was
    /// answered from the symbol cache or a symbol table, for tests.
    package var modulesOpened: Int {
        lock.lock()
        defer { lock.unlock() }
        return openModules.count
    }

    /// Symbolicates a whole captured stack: element i holds the frames of `addresses[i]`.
    package func symbolicate(stack addresses: [UInt64], modules: [ModuleSnapshot]) -> [[SymbolicatedFrame]] {
        addresses.enumerated().map { index, address in
            symbolicate(address: address, isReturnAddress: index > 0, modules: modules)
        }
    }

    /// What symbolicating `module` left out, when it reached one of its bounds (a report shows
    /// this beside the module).
    package func note(of module: ModuleSnapshot) -> String? {
        lock.lock()
        defer { lock.unlock() }
        return moduleNotes[ModuleKey(module)]
    }

    /// Where the symbols of `module` come from (checks the build-id once, then cached).
    package func resolution(of module: ModuleSnapshot) -> ModuleResolution {
        lock.lock()
        defer { lock.unlock() }
        return resolveLocked(ModuleKey(module))
    }

    static func module(containing address: UInt64, in modules: [ModuleSnapshot]) -> ModuleSnapshot? {
        moduleIndex(containing: address, in: modules).map { modules[$0] }
    }

    /// The index in `modules` of the first module whose range holds `address`.
    static func moduleIndex(containing address: UInt64, in modules: [ModuleSnapshot]) -> Int? {
        modules.firstIndex { $0.start <= address && address < $0.end }
    }

    /// A system library symbolicated from its own file: names from its symbol table only (no
    /// DWARF lines, no debug directories searched), unless `systemLibraryLines`.
    private func isNamesOnly(_ key: ModuleKey, symbolFile: String) -> Bool {
        !systemLibraryLines && symbolFile == key.path && Self.isSystemLibrary(key.path)
    }

    /// A system library's names table: from its separate debug file when there is one with
    /// function symbols, else from the library itself (`make` reads one file).
    private static func namesTable(debugFile: String?, library: String, make: (String) -> ELFSymbolTable?) -> ELFSymbolTable? {
        debugFile.flatMap(make) ?? make(library)
    }

    /// Why a source of names was not used, each reason reported once, in the order found: the
    /// symbol cache's directory was refused, a symbol store's file was refused, or a debuginfod
    /// query got something other than a file. A command prints these once it is done (the report
    /// itself shows only which modules lack names).
    package var notices: [String] {
        let refusal = cache?.refusal.map { ["symbol cache not used: " + $0] } ?? []
        lock.lock()
        defer { lock.unlock() }
        return refusal + noticed
    }

    private func noteLocked(_ notice: String) {
        if !noticed.contains(notice) { noticed.append(notice) }
    }

    // MARK: - Caches (call with `lock` held)

    private func resolveLocked(_ key: ModuleKey) -> ModuleResolution {
        if let known = resolutions[key] { return known }
        let resolution = resolveUncached(key)
        resolutions[key] = resolution
        return resolution
    }

    private func resolveUncached(_ key: ModuleKey) -> ModuleResolution {
        let (path, expectedBuildID) = (key.path, key.buildID)
        let found = ELFBuildID.read(path: path)
        if let found {
            if expectedBuildID.isEmpty { return .unverified(path: path) }
            if found == expectedBuildID { return .verified(path: path) }
        }
        if let debugFile = debugFile(forBuildID: expectedBuildID) { return .debugFile(path: debugFile) }
        if let symbols = BreakpadSymbolStore.find(in: symbolStores, modulePath: path, buildID: expectedBuildID, notice: noteLocked) {
            breakpadFiles[key] = symbols
            return .breakpadSymbols(path: symbols.path)
        }
        if let debuginfod, !expectedBuildID.isEmpty {
            switch debuginfod.fetch(buildID: expectedBuildID) {
            case .success(let file): return .debuginfod(path: file)
            case .failure(let failure): noteLocked(failure.description)
            }
        }
        if let found { return .mismatched(expected: expectedBuildID, found: found) }
        return .missing(path: path)
    }

    /// `<dir>/.build-id/xx/yyyy.debug` holding exactly `buildID`.
    private func debugFile(forBuildID buildID: String) -> String? {
        // The id comes from a dump file: only plain hex may become part of a path.
        guard buildID.count >= 4, buildID.count.isMultiple(of: 2), BuildID.isPlainHex(buildID) else { return nil }
        let head = buildID.prefix(2), tail = buildID.dropFirst(2)
        for directory in debugDirectories {
            let candidate = "\(directory)/.build-id/\(head)/\(tail).debug"
            if ELFBuildID.read(path: candidate) == buildID { return candidate }
        }
        return nil
    }

    static func isSystemLibrary(_ path: String) -> Bool {
        ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"].contains { path.hasPrefix($0) }
    }

    /// Names of a system library from its separate debug file's symbol table (found by
    /// build-id), else from the library's own; nil when neither has one.
    /// A table made for a report's addresses (`prime`) is kept while it answers for `address`.
    private func systemSymbolsLocked(_ key: ModuleKey, for address: UInt64) -> ELFSymbolTable? {
        if let known = systemSymbols[key], known?.answers(address) ?? true { return known }
        let table = Self.namesTable(debugFile: debugFile(forBuildID: key.buildID), library: key.path) { ELFSymbolTable(path: $0) }
        systemSymbols[key] = table
        return table
    }

    /// Why a lookup has no answer: the module file could not be read (reported on its frames).
    private struct Unreadable: Error {
        var reason: String?
    }

    /// The raw frames for a lookup: among the module's answers, else looked up in the module
    /// (and kept among its answers to store).
    private func answerLocked(_ key: ModuleKey, symbolFile: String, at offset: UInt64) -> Result<[IndexedFrame], Unreadable> {
        let module = answersLocked(key, symbolFile: symbolFile)
        if let known = module.known(offset) { return .success(known) }
        let found = lookUpLocked(key, symbolFile: symbolFile, at: offset)
        if case .success(let frames) = found { module.add(offset, frames) }
        return found
    }

    /// A lookup in the module itself: names from a system library's symbol table, else libdw.
    private func lookUpLocked(_ key: ModuleKey, symbolFile: String, at offset: UInt64) -> Result<[IndexedFrame], Unreadable> {
        let namesOnly = isNamesOnly(key, symbolFile: symbolFile)
        if namesOnly, let table = systemSymbolsLocked(key, for: offset), let symbol = table.lookup(offset) {
            return .success([IndexedFrame(function: symbol.name, file: nil, line: 0, column: 0, isInlined: false, functionOffset: symbol.offset)])
        }
        // A system library without a separate symbol table: its own .dynsym/.symtab (and DWARF
        // if it has any), but no search of the debug directories.
        let open = openLocked(symbolFile, for: key, searchDebugDirectories: !namesOnly)
        guard let handle = open.handle else { return .failure(Unreadable(reason: open.failure)) }
        let capacity = SymbolIndex.maximumChain
        var raw = [hws_frame](repeating: hws_frame(), count: capacity)
        let count = Int(raw.withUnsafeMutableBufferPointer { hws_module_symbolicate(handle, offset, $0.baseAddress, Int32(capacity)) })
        return .success(raw.prefix(count).map { frame in
            IndexedFrame(function: frame.function.map { BoundedText.string($0) }, file: frame.file.map { BoundedText.string($0) },
                         line: Int(frame.line), column: Int(frame.column), isInlined: frame.inlined != 0,
                         functionOffset: frame.has_function_offset != 0 ? frame.function_offset : nil)
        })
    }

    /// The module's answers: read from the symbol cache's entry for this very file (module and
    /// debug file as they are now) on first use; only this process's without a usable cache.
    private func answersLocked(_ key: ModuleKey, symbolFile: String) -> ModuleAnswers {
        if let known = answers[key] { return known }
        let namesOnly = isNamesOnly(key, symbolFile: symbolFile)
        var cacheKey: SymbolCache.Key?
        if let cache, cache.isUsable {
            cacheKey = SymbolCache.key(modulePath: symbolFile, buildID: key.buildID, debugFile: debugFile(forBuildID: key.buildID),
                                       namesOnly: namesOnly)
        }
        let module = ModuleAnswers(cacheKey: cacheKey, namesOnly: namesOnly, stored: cacheKey.flatMap { cache?.load($0) })
        answers[key] = module
        return module
    }

    /// Stores the module's stored and fresh answers together as its cache entry (at most
    /// `SymbolIndex.maximumAnswers`, the fresh ones first), when it has fresh ones.
    private func storeAnswersLocked(_ key: ModuleKey) {
        guard let module = answers[key], !module.fresh.isEmpty, let cache, let cacheKey = module.cacheKey else { return }
        var all = module.fresh
        if let stored = module.stored, stored.isWhole {
            for address in stored.answeredAddresses where all.count < SymbolIndex.maximumAnswers && all[address] == nil {
                all[address] = stored.answer(at: address)
            }
        }
        guard let index = SymbolIndex.build(answers: all, identity: cacheKey.identity, namesOnly: module.namesOnly) else { return }
        cache.store(index, as: cacheKey)
        module.stored = index
        module.fresh = [:]
    }

    private func openLocked(_ path: String, for key: ModuleKey, searchDebugDirectories: Bool = true) -> OpenModule {
        useClock += 1
        if let open = openModules[key] {
            open.lastUse = useClock
            return open
        }
        let (handle, error) = ModuleWalk.open(path, debugDirectories: searchDebugDirectories ? debugDirectories : [])
        let failure = handle == nil ? "cannot read symbols of \(path): " + error : nil
        let open = OpenModule(handle: handle, failure: failure, lastUse: useClock)
        if openModules.count >= maximumOpenModules,
           let oldest = openModules.min(by: { $0.value.lastUse < $1.value.lastUse }) {
            openModules[oldest.key] = nil
        }
        openModules[key] = open
        return open
    }
}
