// Whose code a hung stack runs. A test's code is its function and every closure nested in it;
// demangled, their names all contain the function's qualified name followed by "(":
//   LimitTests.BlockingTests.loadsTheFile() async throws -> ()
//   closure #1 @Sendable () -> () in LimitTests.BlockingTests.loadsTheFile() async throws -> ()
//   (1) suspend resume partial function for LimitTests.BlockingTests.loadsTheFile() async throws -> ()
// (docs/hang-monitor.md "Hang limits in tests" describes what this cannot see.)
import Testing
import HangwatchReport

struct HangLimitOwner: Sendable {
    /// The test target's module, e.g. "LimitTests".
    var moduleName: String
    /// "LimitTests.BlockingTests.loadsTheFile" when the containing types are known (a Swift
    /// Testing test); nil for a bare function name (XCTest: `#function` has no type).
    var qualifiedName: String?
    /// "loadsTheFile".
    var baseName: String
    /// The owner's source file, to tell apart same-named functions when the type is unknown.
    var filePath: String?

    /// A Swift Testing test: its ID names the module, the containing types and the function.
    init(test: Test) {
        let id = test.id
        moduleName = id.moduleName
        let components = id.nameComponents
        baseName = Self.baseName(of: test.name)
        qualifiedName = ([id.moduleName] + components.dropLast() + [baseName]).joined(separator: ".")
        filePath = test.sourceLocation.filePath
    }

    /// A function known by `#fileID` ("Module/File.swift"), `#filePath` and `#function`.
    init(fileID: String, filePath: String, function: String) {
        moduleName = String(fileID.prefix { $0 != "/" })
        baseName = Self.baseName(of: function)
        qualifiedName = nil
        self.filePath = filePath
    }

    /// "loadsTheFile(named:)" → "loadsTheFile".
    static func baseName(of function: String) -> String { String(function.prefix { $0 != "(" }) }

    /// The frame is the owner's function or a closure nested in it.
    func runs(_ frame: Report.Frame) -> Bool {
        guard let function = frame.function else { return false }
        if let qualifiedName { return function.contains(qualifiedName + "(") }
        guard function.contains("." + baseName + "(") && function.contains(moduleName + ".") else { return false }
        return frame.file == nil || frame.file == filePath
    }

    /// The frame's function belongs to the owner's module (the first such frame is marked).
    func isInOwnModule(_ frame: Report.Frame) -> Bool {
        guard let function = frame.function else { return false }
        return function.hasPrefix(moduleName + ".") || function.contains(" in " + moduleName + ".")
            || function.contains(" for " + moduleName + ".")
    }
}
