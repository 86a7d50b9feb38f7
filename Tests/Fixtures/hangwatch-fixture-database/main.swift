// A child program for the database tests: several copies run at once against one database
// directory, as separate processes of an application would.
//   process <db> <bundle> <results-dir> <go-file>   claim+process until nothing is left
//   client-id <db> <go-file>                        print the database's client id
//   claim-and-die <db> <bundle>                     claim one dump, then exit without finishing
//   hold-locked <db> <bundle>                       pre-open a dump and stay alive
//   write-report-fsize <db> <id> <bytes> <limit>    write a report under RLIMIT_FSIZE
//   readonly <db>                                   try writes (run on a read-only bind mount)
//   populate <db> <bundle>                          one finished dump and one completed report
//   write-dumps <db> <count>                        real captures as deferred dumps, "finished <path>" each
//   upload <db> <url>                               DumpClient.startProcessingPendingReports until no report is
//                                                   pending (or 60 s); prints "server-id <id>" of the last one
import DumpWithoutCrash
import Foundation
#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("database-fixture: \(message)\n".utf8))
    exit(2)
}

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Every copy spins until the test creates the go file, so they all start together.
func waitForGo(_ path: String) {
    var spins = 0
    while access(path, F_OK) != 0 {
        usleep(500)
        spins += 1
        if spins > 120_000 { fail("no go file after 60 s") }
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else { fail("usage: database-fixture <command> <db> ...") }
let command = arguments[1]
let databasePath = arguments[2]

do {
    switch command {
    case "process":
        let bundleID = arguments[3], results = arguments[4]
        waitForGo(arguments[5])
        let database = try CrashReportDatabase(path: databasePath)
        var processed = 0
        while true {
            let claims = try database.claimIntermediateDumps(bundleID: bundleID, limit: 1)
            if claims.isEmpty { break }
            for claim in claims {
                let data = try database.readClaimedDump(claim)
                guard String(decoding: data, as: UTF8.self) == "dump \(claim.uuid.uuidString)" else {
                    fail("dump \(claim.path) has unexpected contents")
                }
                // One line per processing of this dump: the test counts them.
                let record = open(results + "/" + claim.uuid.uuidString, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
                guard record >= 0 else { fail("cannot open result file") }
                let line = "\(getpid())\n"
                _ = line.withCString { write(record, $0, strlen($0)) }
                close(record)
                let json = Data("{\"dump\":\"\(claim.uuid.uuidString)\",\"pid\":\(getpid())}".utf8)
                try database.writeReport(id: claim.uuid.uuidString, json: json, text: "processed by \(getpid())")
                try database.completeClaim(claim)
                processed += 1
            }
        }
        say("processed \(processed)")

    case "client-id":
        waitForGo(arguments[3])
        let database = try CrashReportDatabase(path: databasePath)
        say("client-id \(database.clientID.uuidString)")

    case "claim-and-die":
        let database = try CrashReportDatabase(path: databasePath)
        guard let claim = try database.claimIntermediateDumps(bundleID: arguments[3], limit: 1).first else { fail("nothing to claim") }
        say("claimed \(claim.uuid.uuidString)")
        _exit(0) // a processor that dies mid-way: the claim stays in processing/

    case "hold-locked":
        let database = try CrashReportDatabase(path: databasePath)
        let file = try database.createIntermediateDump(bundleID: arguments[3])
        _ = "partial".withCString { write(file.fd, $0, 7) }
        say("locked \(file.path)")
        while true { pause() }

    case "write-report-fsize":
        let database = try CrashReportDatabase(path: databasePath)
        signal(SIGXFSZ, SIG_IGN) // make write() fail with EFBIG instead of killing us
        var limit = rlimit(rlim_cur: rlim_t(arguments[5])!, rlim_max: rlim_t(arguments[5])!)
        guard setrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 else { fail("setrlimit") }
        do {
            try database.writeReport(id: arguments[3], json: Data(repeating: 0x20, count: Int(arguments[4])!), text: "text")
            say("written")
        } catch {
            say("error \(error)")
        }

    case "readonly":
        // Run under `unshare -m` after a read-only bind mount of <db> (the test does that).
        let database = try CrashReportDatabase(path: databasePath)
        say("opened")
        do { _ = try database.createIntermediateDump(bundleID: "com.example.ro"); say("dump created") } catch { say("dump error \(error)") }
        do { try database.writeReport(id: "ro-report", json: Data("{}".utf8), text: "t"); say("report written") } catch { say("report error \(error)") }
        do { try database.markCompleted(id: "existing", serverID: "s1"); say("completed") } catch { say("complete error \(error)") }

    case "populate":
        let database = try CrashReportDatabase(path: databasePath)
        let file = try database.createIntermediateDump(bundleID: arguments[3])
        _ = "dump".withCString { write(file.fd, $0, 4) }
        say("dump \(try database.finish(file))")
        try database.writeReport(id: "populated", json: Data("{}".utf8), text: "text")
        try database.writeReport(id: "uploaded", json: Data("{}".utf8), text: "text")
        try database.markCompleted(id: "uploaded", serverID: "server-1")
        say("done")

    case "write-dumps":
        // Real captures of this process, written as pending dumps (the storm test kills it anywhere).
        let client = try DumpClient(databasePath: databasePath, bundleID: "com.example.storm")
        for _ in 0..<(Int(arguments[3]) ?? 1) {
            say("finished \(try client.dumpWithoutCrashAndDeferProcessing())")
        }

    case "upload":
        // What a program does: the library's own background uploader, then wait for the report.
        let client = try DumpClient(databasePath: databasePath, bundleID: "com.example.upload")
        guard let url = URL(string: arguments[3]) else { fail("bad url") }
        let scheduler = client.startProcessingPendingReports(uploadURL: url, pollInterval: 0.2)
        let database = try CrashReportDatabase(path: databasePath)
        for _ in 0..<600 {
            let reports = try database.listReports()
            if !reports.contains(where: { $0.state == .pending }), let done = reports.last(where: { $0.state == .completed }) {
                scheduler.stop()
                say("server-id \(done.serverID ?? "")")
                exit(0)
            }
            usleep(100_000)
        }
        fail("not uploaded within 60 s")

    default:
        fail("unknown command \(command)")
    }
} catch {
    fail("\(error)")
}
