// swift-tools-version:6.1
// README.md's first program ("The smallest program"): a command-line tool watched by
// HangMonitor, its main.swift word for word. scripts/example-first-program builds it, lets it
// hang, kills it and checks what `hangwatch process` and `hangwatch list` then say. The
// dependency line is the README's, with this repository's path: "../..", a folder of whatever
// name the clone has (`name:` is what lets `package: "hangwatch"` find it).
import PackageDescription

let package = Package(
    name: "my-tool",
    dependencies: [
        .package(name: "hangwatch", path: "../.."),
    ],
    targets: [
        .executableTarget(name: "my-tool", dependencies: [.product(name: "HangMonitor", package: "hangwatch")]),
    ]
)
